import { Effect, Either } from "effect"
import { AppConfig } from "../../config/AppConfig.js"
import { PublicUrl } from "../../config/PublicUrl.js"
import { admitCall, connectStream, decodeEntry, formParams, hangupOnly, refusal, twilioSigned, withCustomParameters } from "./CallAdmission.js"
import { EntryPaths } from "../../kernel/EntryPaths.js"
import { directionOf, entryCustomParameters, EntryQuery, type EntryRequest, VoiceWebhookForm } from "./EntryWire.js"
import { answerWithFallback } from "./EntryFallback.js"

/**
 * `POST /telephony/twilio/voice?agentId=..&environmentId=..`, the number's voice webhook. Answers
 *
 *   <Response><Connect><Stream url="wss://PLACED/telephony/twilio/stream">
 *     <Parameter name="token|agentId|environmentId|from|to|direction" value=".."/>...
 *   </Stream></Connect></Response>
 *
 * PLACED is the PUBLIC_URL of the instance placement chose (docs/scaling.md, "Placement").
 * X-Twilio-Signature is checked first when TWILIO_AUTH_TOKEN is set (401 when it fails); a bad
 * query or form is 400 (extra query parameters are the agent's custom parameters: EntryWire.entryCustomParameters); an unknown environment is a spoken refusal; an unreadable store is 503
 * (Twilio then tries the number's fallback URL).
 */
export const twilioVoiceEntry = (request: EntryRequest) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const publicUrl = (yield* PublicUrl).current()
    const params = formParams(request.body)
    if (!(yield* twilioSigned(request, "twilio voice webhook refused"))) return hangupOnly(401)
    const query = yield* Effect.either(decodeEntry(EntryQuery, request.query))
    const form = yield* Effect.either(decodeEntry(VoiceWebhookForm, params))
    const custom = entryCustomParameters(request.query)
    if (Either.isLeft(query) || Either.isLeft(form) || "problem" in custom) {
      yield* Effect.logWarning("twilio voice webhook refused: malformed", {
        problem: Either.isLeft(query) ? `query ${query.left}` : Either.isLeft(form) ? form.left : "problem" in custom ? `query: ${custom.problem}` : ""
      })
      return hangupOnly(400)
    }
    const { agentId, environmentId, sessionId } = query.right
    const call = form.right
    const direction = directionOf(call.Direction)
    const admission = yield* admitCall({
      agentId,
      environmentId,
      kind: "twilio",
      callId: call.CallSid,
      from: call.From,
      to: call.To,
      direction,
      accountSid: call.AccountSid,
      ...withCustomParameters(custom.parameters),
      ...(sessionId !== undefined ? { sessionId } : {})
    })
    if (admission._tag === "OverLimit" || admission._tag === "Shed") {
      // Over the environment's limit (docs/scaling.md, "Fleet-wide call limits") or shed by its open breaker (docs/fallback.md, "Shedding"): the error fallback is the answer.
      return yield* answerWithFallback("twilio", { agentId, environmentId, sessionId: admission.sessionId }, call, admission)
    }
    if (admission._tag !== "Admitted") return refusal(admission)
    return connectStream("twilio", { publicUrl, fleetUrl: config.fleetUrl }, {
      streamBase: admission.streamBase,
      token: admission.token,
      agentId,
      environmentId,
      sessionId: admission.sessionId,
      from: call.From,
      to: call.To,
      direction
    })
  }).pipe(Effect.annotateLogs("route", EntryPaths.twilioVoice))
