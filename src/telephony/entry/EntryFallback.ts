import { Effect } from "effect"
import type { CallRef, CarrierShape } from "../../kernel/Carrier.js"
import { HardError } from "../../kernel/HardError.js"
import { nowIso } from "../../kernel/Time.js"
import { ErrorFallback } from "../../fallback/ErrorFallback.js"
import { sessionInfoOf } from "../../recovery/OrphanReconciler.js"
import { SessionEndJournal } from "../../sessions/SessionEndJournal.js"
import type { Session } from "../../sessions/SessionSchema.js"
import { dialTwiml, hangupTwiml } from "../../twiml/TwimlBuilder.js"

/**
 * A carrier adapter that answers the call's request instead of calling REST: what the error
 * fallback asks of the call becomes the TwiML/TeXML of the answer (the last request wins).
 */
export const answerCarrier = () => {
  let markup: string | undefined
  const carrier: CarrierShape = {
    hangup: () =>
      Effect.sync(() => {
        markup = hangupTwiml()
      }),
    transfer: (_call, to, callerId) =>
      Effect.sync(() => {
        markup = dialTwiml(to, callerId)
      }),
    applyTwiml: (_call, twiml) =>
      Effect.sync(() => {
        markup = twiml
      })
  }
  return { carrier, markup: () => markup }
}

/** The call entering, as its carrier's webhook describes it. */
export interface EnteringCall {
  readonly agentId: string
  readonly environmentId: string
  readonly sessionId: string
  readonly call: CallRef
  readonly from: string | null
  readonly to: string | null
  readonly direction: "inbound" | "outbound"
}

/** Why the entry refused the call to an agent and answered it with the error fallback instead. */
export type EntryRefusal =
  /** The environment's `maxConcurrentCalls` is reached across the fleet (docs/scaling.md, "Fleet-wide call limits"). */
  | { readonly _tag: "OverLimit"; readonly limit: number }
  /** The environment's breaker is open and the call is not the probe (docs/fallback.md, "Shedding"). */
  | { readonly _tag: "Shed" }

/** The message the fallback webhook gets (`error=`, `ErrorMessage`) for a shed call. */
export const BREAKER_OPEN_MESSAGE = "The environment's no-response breaker is open: the call was shed at the entry."

/**
 * A call refused at the entry (over the environment's fleet-wide limit, or shed by its open
 * breaker): the environment's error fallback runs at once through `carrier` (the answer to the
 * carrier's request; the carriers' REST APIs when not given), and the session is recorded
 * `failed` with endReason `concurrency_limit` or `breaker_open`, its session.ended queued like any
 * other's. No agent is involved. `via` is what the record says reached the carrier: `rest` for a
 * `carrier` over the REST APIs (a Call Control call's commands), the answer (`redirect`) otherwise.
 */
export const rescueAtEntry = (entering: EnteringCall, refusal: EntryRefusal, carrier?: CarrierShape, via: "rest" | "redirect" = "redirect") =>
  Effect.gen(function* () {
    const fallback = yield* ErrorFallback
    const journal = yield* SessionEndJournal
    const now = yield* nowIso
    const error =
      refusal._tag === "OverLimit"
        ? new HardError({ kind: "concurrency_limit", message: `The environment already has ${refusal.limit} calls live (maxConcurrentCalls).` })
        : new HardError({ kind: "breaker_open", message: BREAKER_OPEN_MESSAGE })
    const record: Session = {
      id: entering.sessionId,
      agentId: entering.agentId,
      environmentId: entering.environmentId,
      provider: entering.call.kind === "twilio" ? "twilio" : "telnyx",
      callId: entering.call.callId,
      from: entering.from,
      to: entering.to,
      direction: entering.direction,
      createdAt: now,
      endedAt: now,
      status: "failed",
      endReason: error.kind,
      turns: [],
      fallback: null,
      callKind: entering.call.kind,
      ...(entering.call.accountSid !== undefined ? { accountSid: entering.call.accountSid } : {})
    }
    const info = sessionInfoOf(record)
    const outcome = yield* carrier === undefined ? fallback.rescue(info, error) : fallback.rescueWith(info, error, carrier, via)
    yield* journal.submit({ session: { ...record, fallback: outcome.fallback ?? null } })
  }).pipe(Effect.annotateLogs({ sessionId: entering.sessionId, agentId: entering.agentId, environmentId: entering.environmentId }))
