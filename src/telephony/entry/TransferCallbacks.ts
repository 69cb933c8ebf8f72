import { Duration, Effect, Either, Option, Schema } from "effect"
import { Carriers, type CallRef } from "../../kernel/Carrier.js"
import { SessionParams } from "../../sessions/SessionSchema.js"
import { dialCallStatusOutcome, hangupCauseOutcome, TransferOutcomes, type SettledTransfer } from "../../sessions/TransferOutcomes.js"
import { sayAndHangupTwiml } from "../../twiml/TwimlBuilder.js"
import { type TelnyxVerifier } from "../CarrierSignatures.js"
import { TOKEN_TTL_MS } from "../SessionTokens.js"
import { decodeEntry, formParams, hangupOnly, markupAnswer, signedForm, telnyxSigned } from "./CallAdmission.js"
import { EntryBackgroundWork } from "./EntryBackgroundWork.js"
import { returnCallControlCaller, returnCaller } from "./TransferReturn.js"
import type { CallRelocation } from "./CallRelocation.js"
import type { ErrorFallback } from "../../fallback/ErrorFallback.js"
import type { SessionEndJournal } from "../../sessions/SessionEndJournal.js"
import type { TelnyxCallCommands } from "../../carriers/TelnyxCallCommands.js"
import { CallControlWebhook, type EntryRequest, type EntryResponse } from "./EntryWire.js"

/** `?agentId=..&sessionId=..` on every transfer report URL (TransferOutcomes.begin): the session, as the session routes name it. */
const TransferQuery = SessionParams

const CarrierWord = Schema.String.pipe(Schema.maxLength(64))

/** The `<Dial action>` request (Twilio, TeXML): the dialled call's final status and its talk time in seconds. */
const DialOutcomeForm = Schema.Struct({
  DialCallStatus: CarrierWord,
  DialCallDuration: Schema.optional(Schema.String.pipe(Schema.pattern(/^\d{1,7}$/)))
})

/** A `<Number statusCallback>` request: the dialled call's progress. */
const DialProgressForm = Schema.Struct({ CallStatus: CarrierWord })

/** The fields read from the new leg's Call Control webhooks. */
const LegPayload = Schema.Struct({ hangup_cause: Schema.optional(Schema.NullOr(CarrierWord)) })

const noContent: EntryResponse = { status: 204, contentType: "application/json", body: "" }
const received: EntryResponse = { status: 200, contentType: "application/json", body: JSON.stringify({ received: true }) }

type TwimlKind = "twilio" | "telnyx-texml"

/** What the caller hears after the transfer: the failed fallback transfer's message, then the hang-up. */
const afterTransfer = (settled: Option.Option<SettledTransfer>): string | undefined =>
  Option.match(settled, {
    onNone: () => undefined,
    onSome: ({ sayBeforeHangup }) => (sayBeforeHangup !== null ? sayAndHangupTwiml(sayBeforeHangup) : undefined)
  })

/**
 * `POST /telephony/twilio/transfer-outcome` and `/telephony/telnyx/transfer-outcome`
 * (`?agentId=..&sessionId=..`): the `<Dial action>` of a tracked transfer (docs/fallback.md,
 * "Transfer outcomes"). Records the outcome from `DialCallStatus` and `DialCallDuration`, and
 * answers what the caller hears next: for an agent's transfer not answered, a stream back to an
 * idle agent or else the error fallback (TransferReturn); the environment's transferFailedMessage
 * then a hang-up for a failed fallback transfer; a hang-up otherwise.
 */
export const transferOutcomeEntry = (kind: TwimlKind, request: EntryRequest, verifyTelnyx: TelnyxVerifier) =>
  Effect.gen(function* () {
    if (!(yield* signedForm(kind, request, verifyTelnyx, "transfer outcome refused"))) return hangupOnly(401)
    const query = yield* Effect.either(decodeEntry(TransferQuery, request.query))
    const form = yield* Effect.either(decodeEntry(DialOutcomeForm, formParams(request.body)))
    if (Either.isLeft(query) || Either.isLeft(form)) {
      yield* Effect.logWarning("transfer outcome refused: malformed", { problem: Either.isLeft(query) ? `query ${query.left}` : Either.isLeft(form) ? form.left : "" })
      return hangupOnly(400)
    }
    const carrierStatus = form.right.DialCallStatus
    const duration = form.right.DialCallDuration
    const settled = yield* (yield* TransferOutcomes).settle(
      query.right,
      {
        status: dialCallStatusOutcome(carrierStatus) ?? "failed",
        carrierStatus,
        ...(duration !== undefined ? { talkMsHint: Number(duration) * 1000 } : {})
      },
      { returnCaller: { within: Duration.millis(TOKEN_TTL_MS) } }
    )
    // The agent's transfer was not answered: the caller comes back (docs/fallback.md, "The return path").
    if (Option.isSome(settled) && settled.value.reopened) return yield* returnCaller(kind, settled.value)
    return markupAnswer(afterTransfer(settled))
  })

/**
 * `POST /telephony/twilio/transfer-progress` and `/telephony/telnyx/transfer-progress`: the
 * dialled number's status callbacks (`initiated`, `ringing`, `answered`, `completed`). The answer
 * (`in-progress`) is when ringing ends and talking starts; the outcome itself comes with the
 * `<Dial action>`, which is also what decides the caller's next words.
 */
export const transferProgressEntry = (kind: TwimlKind, request: EntryRequest, verifyTelnyx: TelnyxVerifier) =>
  Effect.gen(function* () {
    if (!(yield* signedForm(kind, request, verifyTelnyx, "transfer progress refused"))) return { ...noContent, status: 401 }
    const query = yield* Effect.either(decodeEntry(TransferQuery, request.query))
    const form = yield* Effect.either(decodeEntry(DialProgressForm, formParams(request.body)))
    if (Either.isLeft(query) || Either.isLeft(form)) return { ...noContent, status: 400 }
    if (form.right.CallStatus === "in-progress" || form.right.CallStatus === "answered") {
      yield* (yield* TransferOutcomes).answered(query.right)
    }
    return noContent
  })

/**
 * `POST /telephony/telnyx/transfer-events` (`?agentId=..&sessionId=..`), the `webhook_url` of a
 * Call Control transfer's new leg (Ed25519-verified): `call.answered` / `call.bridged` mark the
 * answer, `call.hangup` is the outcome (its `hangup_cause`). Telnyx keeps the caller's leg when the
 * transfer fails: an agent's transfer busy, not answered or failed brings the caller back to an
 * agent (a new stream on that leg) or the error fallback (TransferReturn); for a fallback transfer
 * callgate speaks the transferFailedMessage and hangs the leg up; after an answered transfer it
 * hangs up what is left of it. Acknowledged at once; the commands run in the background.
 */
export const telnyxTransferEventsEntry = (
  request: EntryRequest,
  verifyTelnyx: TelnyxVerifier
) =>
  Effect.gen(function* () {
    if (!(yield* telnyxSigned(verifyTelnyx, request, "transfer event refused"))) return { ...noContent, status: 401 }
    const query = yield* Effect.either(decodeEntry(TransferQuery, request.query))
    const webhook = yield* Effect.either(decodeEntry(CallControlWebhook, request.body))
    if (Either.isLeft(query) || Either.isLeft(webhook)) return { ...noContent, status: 400 }
    const outcomes = yield* TransferOutcomes
    const ref = query.right
    switch (webhook.right.data.event_type) {
      case "call.answered":
      case "call.bridged":
        yield* outcomes.answered(ref)
        return received
      case "call.hangup": {
        const payload = Schema.decodeUnknownOption(LegPayload)(webhook.right.data.payload)
        const cause = Option.match(payload, { onNone: () => null, onSome: (p) => p.hangup_cause ?? null })
        const settled = yield* outcomes.settle(
          ref,
          { status: hangupCauseOutcome(cause, false), carrierStatus: cause, answeredWhenReported: true },
          { returnCaller: { within: Duration.millis(TOKEN_TTL_MS) } }
        )
        // The agent's transfer was not answered and the caller's leg is still up: back to an agent (docs/fallback.md, "The return path").
        if (Option.isSome(settled) && settled.value.reopened) {
          const back = returnCallControlCaller(settled.value)
          const context = yield* Effect.context<CallRelocation | ErrorFallback | SessionEndJournal | TransferOutcomes | TelnyxCallCommands>()
          yield* (yield* EntryBackgroundWork).start(Effect.provide(back, context))
          return received
        }
        if (Option.isSome(settled)) {
          const { session } = settled.value
          const call: CallRef = {
            kind: session.callKind ?? "telnyx-call-control",
            callId: session.callId,
            ...(session.accountSid !== undefined ? { accountSid: session.accountSid } : {})
          }
          const carriers = yield* Carriers
          const say = afterTransfer(settled)
          yield* (yield* EntryBackgroundWork).start(
            (say !== undefined ? carriers.applyTwiml(call, say) : carriers.hangup(call)).pipe(
              Effect.catchAll((error) => Effect.logWarning("ending the caller's leg after the transfer failed", { error: error.message }))
            )
          )
        }
        return received
      }
      default:
        return received
    }
  })
