import { Effect, Either } from "effect"
import { AppConfig } from "../../config/AppConfig.js"
import { PublicUrl } from "../../config/PublicUrl.js"
import { type TelnyxVerifier } from "../CarrierSignatures.js"
import { admitCall, connectStream, telnyxSigned, decodeEntry, formParams, hangupOnly, refusal, withCustomParameters } from "./CallAdmission.js"
import { EntryPaths } from "../../kernel/EntryPaths.js"
import { directionOf, entryCustomParameters, EntryQuery, type EntryRequest, VoiceWebhookForm } from "./EntryWire.js"
import { answerWithFallback } from "./EntryFallback.js"

/**
 * `POST /telephony/telnyx/texml?agentId=..&environmentId=..`, a TeXML application's voice URL.
 * Answers
 *
 *   <Response><Connect><Stream url="wss://PUBLIC/telephony/telnyx/stream?token=.."
 *     bidirectionalMode="rtp" codec="PCMU" bidirectionalCodec="PCMU" bidirectionalSamplingRate="8000"/></Connect>
 *   <Redirect>.../telephony/telnyx/after-stream?...</Redirect></Response>
 *
 * in the environment's telnyxStreamCodec (PCMU by default; docs/calls.md, "Audio formats"). *
 * The session token rides in the stream URL (Telnyx streams carry no custom parameters to rely
 * on). Requests are Ed25519-verified like every Telnyx webhook when TELNYX_PUBLIC_KEY is set.
 */
export const telnyxTexmlEntry = (
  request: EntryRequest,
  verify: TelnyxVerifier
) =>
  Effect.gen(function* () {
    const publicUrl = yield* PublicUrl
    const { fleetUrl } = yield* AppConfig
    if (!(yield* telnyxSigned(verify, request, "telnyx TeXML request refused"))) return hangupOnly(401)
    const query = yield* Effect.either(decodeEntry(EntryQuery, request.query))
    const form = yield* Effect.either(decodeEntry(VoiceWebhookForm, formParams(request.body)))
    const custom = entryCustomParameters(request.query)
    if (Either.isLeft(query) || Either.isLeft(form) || "problem" in custom) {
      yield* Effect.logWarning("telnyx TeXML request refused: malformed", {
        problem: Either.isLeft(query) ? `query ${query.left}` : Either.isLeft(form) ? form.left : "problem" in custom ? `query: ${custom.problem}` : ""
      })
      return hangupOnly(400)
    }
    const { agentId, environmentId } = query.right
    const call = form.right
    const admission = yield* admitCall({
      agentId,
      environmentId,
      kind: "telnyx-texml",
      callId: call.CallSid,
      from: call.From,
      to: call.To,
      direction: directionOf(call.Direction),
      accountSid: call.AccountSid,
      ...withCustomParameters(custom.parameters)
    })
    if (admission._tag === "OverLimit" || admission._tag === "Shed") {
      // Over the environment's limit (docs/scaling.md, "Fleet-wide call limits") or shed by its open breaker (docs/fallback.md, "Shedding"): the error fallback is the answer.
      return yield* answerWithFallback("telnyx-texml", { agentId, environmentId, sessionId: admission.sessionId }, call, admission)
    }
    if (admission._tag !== "Admitted") return refusal(admission)
    return connectStream("telnyx-texml", { publicUrl: publicUrl.current(), fleetUrl }, {
      streamBase: admission.streamBase,
      token: admission.token,
      agentId,
      environmentId,
      sessionId: admission.sessionId,
      telnyxStreamCodec: admission.telnyxStreamCodec
    })
  }).pipe(Effect.annotateLogs("route", EntryPaths.telnyxTexml))
