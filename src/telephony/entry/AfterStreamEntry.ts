import { Effect, Either } from "effect"
import type { CallKind } from "../../kernel/Carrier.js"
import { AfterStream } from "../../recovery/AfterStream.js"
import { ErrorFallback } from "../../fallback/ErrorFallback.js"
import { type TelnyxVerifier } from "../CarrierSignatures.js"
import { decodeEntry, formParams, hangupOnly, markupAnswer, signedForm } from "./CallAdmission.js"
import { answerCarrier } from "./EntryFallback.js"
import { AfterStreamQuery, directionOf, type EntryRequest, VoiceWebhookForm } from "./EntryWire.js"

/**
 * `POST /telephony/twilio/after-stream` and `POST /telephony/telnyx/after-stream`
 * (`?agentId=..&environmentId=..&sessionId=..`): the `<Redirect>` after the entry answer's
 * `<Connect><Stream>`, which the carrier follows when the stream ends (docs/reliability.md,
 * "Instance loss"). Signature-checked like the entry webhooks. Answers a hang-up when the session
 * ended properly, the environment's error fallback when it was abandoned.
 */
export const afterStreamEntry = (
  kind: Extract<CallKind, "twilio" | "telnyx-texml">,
  request: EntryRequest,
  verifyTelnyx: TelnyxVerifier
) =>
  Effect.gen(function* () {
    if (!(yield* signedForm(kind, request, verifyTelnyx, "returning call refused"))) return hangupOnly(401)
    const params = formParams(request.body)
    const query = yield* Effect.either(decodeEntry(AfterStreamQuery, request.query))
    const form = yield* Effect.either(decodeEntry(VoiceWebhookForm, params))
    if (Either.isLeft(query) || Either.isLeft(form)) {
      yield* Effect.logWarning("returning call refused: malformed", {
        problem: Either.isLeft(query) ? `query ${query.left}` : Either.isLeft(form) ? form.left : ""
      })
      return hangupOnly(400)
    }
    // A rescue whose REST request failed ended the stream to come here: its answer is kept.
    const kept = (yield* ErrorFallback).takeRedirectAnswer(query.right.sessionId)
    if (kept !== undefined) {
      yield* Effect.logInfo("the carrier followed the <Redirect>: answering with the rescue its REST request could not make", {
        sessionId: query.right.sessionId
      })
      return markupAnswer(kept)
    }
    const answer = answerCarrier()
    const outcome = yield* (yield* AfterStream).answer(
      {
        ...query.right,
        call: { kind, callId: form.right.CallSid, accountSid: form.right.AccountSid },
        from: form.right.From ?? null,
        to: form.right.To ?? null,
        direction: directionOf(form.right.Direction)
      },
      answer.carrier
    )
    return markupAnswer(outcome === "rescued" ? answer.markup() : undefined)
  })
