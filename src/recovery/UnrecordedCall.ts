import { Effect } from "effect"
import type { CallRef, CarrierShape } from "../kernel/Carrier.js"
import type { HardError } from "../kernel/HardError.js"
import { nowIso } from "../kernel/Time.js"
import type { ErrorFallback } from "../fallback/ErrorFallback.js"
import type { SessionEndJournal } from "../sessions/SessionEndJournal.js"
import type { Session } from "../sessions/SessionSchema.js"
import { sessionInfoOf } from "./OrphanReconciler.js"

/** A call as its carrier's request (the entry webhook, the `<Redirect>` after the stream) describes it, with its session id. */
export interface CarrierCall {
  readonly agentId: string
  readonly environmentId: string
  readonly sessionId: string
  readonly call: CallRef
  readonly from: string | null
  readonly to: string | null
  readonly direction: "inbound" | "outbound"
}

/**
 * Ends a call that has no session record: one refused at the entry, or one that came back after its
 * instance stopped before writing the start. Its terminal record (failed, endReason the error's kind,
 * created and ended now) is written with the error fallback's outcome, and its session.ended
 * queued; the fallback acts through `carrier` (the answer to the carrier's request), or the
 * carriers' REST APIs when not given. `fillFallback` as SessionEndJournal's job takes it. `via`
 * is what the record says reached the carrier when `carrier` is given (`rest` for one over the
 * REST APIs, such as a Call Control call's commands).
 */
export const rescueUnrecorded = (
  services: { readonly fallback: ErrorFallback; readonly journal: SessionEndJournal },
  call: CarrierCall,
  error: HardError,
  carrier: CarrierShape | undefined,
  fillFallback: boolean,
  via: "rest" | "redirect" = "redirect"
) =>
  Effect.gen(function* () {
    const { fallback, journal } = services
    const now = yield* nowIso
    const record: Session = {
      id: call.sessionId,
      agentId: call.agentId,
      environmentId: call.environmentId,
      provider: call.call.kind === "twilio" ? "twilio" : "telnyx",
      callId: call.call.callId,
      from: call.from,
      to: call.to,
      direction: call.direction,
      createdAt: now,
      endedAt: now,
      status: "failed",
      endReason: error.kind,
      turns: [],
      fallback: null,
      callKind: call.call.kind,
      ...(call.call.accountSid !== undefined ? { accountSid: call.call.accountSid } : {})
    }
    const info = sessionInfoOf(record)
    const outcome = yield* carrier === undefined ? fallback.rescue(info, error) : fallback.rescueWith(info, error, carrier, via)
    yield* journal.submit({ session: { ...record, fallback: outcome.fallback ?? null }, ...(fillFallback ? { fillFallback } : {}) })
  })
