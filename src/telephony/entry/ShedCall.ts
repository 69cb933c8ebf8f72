import { Effect } from "effect"
import { ErrorFallback } from "../../fallback/ErrorFallback.js"
import type { CallKind, CarrierShape } from "../../kernel/Carrier.js"
import { HardError } from "../../kernel/HardError.js"
import { sessionInfoOf } from "../../session/OrphanReconciler.js"
import { SessionEndJournal } from "../../session/SessionEndJournal.js"
import type { Session } from "../../session/SessionSchema.js"

/** The message the fallback webhook gets (`error=`, `ErrorMessage`) for a shed call. */
export const BREAKER_OPEN_MESSAGE = "The environment's no-response breaker is open: the call was shed at the entry"

/** A call the entry shed (docs/fallback.md, "Shedding"), as its entry request describes it. */
export interface ShedCall {
  readonly agentId: string
  readonly environmentId: string
  readonly sessionId: string
  readonly call: { readonly kind: CallKind; readonly callId: string; readonly accountSid?: string | undefined }
  readonly from: string | null
  readonly to: string | null
  readonly direction: "inbound" | "outbound"
}

/**
 * Sheds a new call while its environment's breaker is open: the environment's error fallback runs
 * at once through `carrier` (for TwiML/TeXML, an adapter whose markup becomes the entry answer; for
 * Call Control, the REST commands), and the session is recorded ended `failed` / `breaker_open`
 * with its `session.ended`, as any rescued session. No agent is involved. Never fails.
 */
export const shedCall = (shed: ShedCall, carrier?: CarrierShape) =>
  Effect.gen(function* () {
    const fallback = yield* ErrorFallback
    const journal = yield* SessionEndJournal
    return yield* shedWith(fallback, journal, shed, carrier)
  })

/** `shedCall` with its services in hand (for work started in the background, which needs none). */
export const shedWith = (fallback: ErrorFallback, journal: SessionEndJournal, shed: ShedCall, carrier?: CarrierShape) =>
  Effect.gen(function* () {
    const now = new Date().toISOString()
    const record: Session = {
      id: shed.sessionId,
      agentId: shed.agentId,
      environmentId: shed.environmentId,
      provider: shed.call.kind === "twilio" ? "twilio" : "telnyx",
      callId: shed.call.callId,
      from: shed.from,
      to: shed.to,
      direction: shed.direction,
      createdAt: now,
      endedAt: now,
      status: "failed",
      endReason: "breaker_open",
      turns: [],
      fallback: null,
      callKind: shed.call.kind,
      ...(shed.call.accountSid !== undefined ? { accountSid: shed.call.accountSid } : {})
    }
    const error = new HardError({ kind: "breaker_open", message: BREAKER_OPEN_MESSAGE })
    const outcome = yield* carrier === undefined
      ? fallback.rescue(sessionInfoOf(record), error)
      : fallback.rescueWith(sessionInfoOf(record), error, carrier)
    yield* journal.submit({ session: { ...record, fallback: outcome.fallback ?? null }, fillFallback: true })
  }).pipe(Effect.annotateLogs({ sessionId: shed.sessionId, agentId: shed.agentId, environmentId: shed.environmentId }))
