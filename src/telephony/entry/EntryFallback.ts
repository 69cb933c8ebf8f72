import { Effect } from "effect"
import type { CarrierShape } from "../../kernel/Carrier.js"
import { HardError } from "../../kernel/HardError.js"
import { ErrorFallback } from "../../fallback/ErrorFallback.js"
import { type CarrierCall, rescueUnrecorded } from "../../recovery/UnrecordedCall.js"
import { SessionEndJournal } from "../../sessions/SessionEndJournal.js"
import { dialTwiml, hangupTwiml } from "../../twiml/TwimlBuilder.js"
import { markupAnswer } from "./CallAdmission.js"
import { directionOf, type EntryResponse, type VoiceWebhookForm } from "./EntryWire.js"

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
    transfer: (_call, to, callerId, tracking) =>
      Effect.sync(() => {
        markup = dialTwiml(to, callerId, tracking)
      }),
    applyTwiml: (_call, twiml) =>
      Effect.sync(() => {
        markup = twiml
      })
  }
  return { carrier, markup: () => markup }
}

/** The call entering, as its carrier's webhook describes it. */
export type EnteringCall = CarrierCall

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
    const services = { fallback: yield* ErrorFallback, journal: yield* SessionEndJournal }
    const error =
      refusal._tag === "OverLimit"
        ? new HardError({ kind: "concurrency_limit", message: `The environment already has ${refusal.limit} calls live (maxConcurrentCalls).` })
        : new HardError({ kind: "breaker_open", message: BREAKER_OPEN_MESSAGE })
    yield* rescueUnrecorded(services, entering, error, carrier, false, via)
  }).pipe(Effect.annotateLogs({ sessionId: entering.sessionId, agentId: entering.agentId, environmentId: entering.environmentId }))

/**
 * A TwiML or TeXML entry's answer to a call it refused: the environment's error fallback runs with
 * the answer as its carrier (answerCarrier), so what the fallback asks of the call is the markup
 * the carrier's request gets back.
 */
export const answerWithFallback = (
  kind: "twilio" | "telnyx-texml",
  ids: { readonly agentId: string; readonly environmentId: string; readonly sessionId: string },
  form: VoiceWebhookForm,
  refusal: EntryRefusal
): Effect.Effect<EntryResponse, never, ErrorFallback | SessionEndJournal> =>
  Effect.gen(function* () {
    const answer = answerCarrier()
    const call = { kind, callId: form.CallSid, accountSid: form.AccountSid }
    yield* rescueAtEntry({ ...ids, call, from: form.From ?? null, to: form.To ?? null, direction: directionOf(form.Direction) }, refusal, answer.carrier)
    return markupAnswer(answer.markup())
  })
