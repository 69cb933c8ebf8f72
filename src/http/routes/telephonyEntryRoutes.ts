import type { Breaker } from "../../breaker/Breaker.js"
import { EntryBackgroundWork } from "../../telephony/entry/EntryBackgroundWork.js"
import type { AfterStream } from "../../recovery/AfterStream.js"
import type { SessionEndJournal } from "../../sessions/SessionEndJournal.js"
import type { Placement } from "../../fleet/Placement.js"
import type { CallLeases } from "../../sessions/CallLeases.js"
import type { ErrorFallback } from "../../fallback/ErrorFallback.js"
import type { LiveCalls } from "../../livecall/LiveCalls.js"
import { Cause, Effect, Option, Runtime } from "effect"
import type { FastifyInstance, FastifyRequest } from "fastify"
import { AuthThrottle } from "../../apikeys/AuthThrottle.js"
import { AppConfig } from "../../config/AppConfig.js"
import type { PublicUrl } from "../../config/PublicUrl.js"
import type { Environments } from "../../environments/Environments.js"
import type { CarrierCallEvents } from "../../livecall/CarrierCallEvents.js"
import { makeTelnyxVerifier } from "../../telephony/CarrierSignatures.js"
import type { SessionTokens } from "../../telephony/SessionTokens.js"
import type { TelnyxCallCommands } from "../../carriers/TelnyxCallCommands.js"
import type { TelnyxCarrier } from "../../carriers/TelnyxCarrier.js"
import type { TelnyxTwimlRunner } from "../../carriers/TelnyxTwimlRunner.js"
import { EntryPaths } from "../../kernel/EntryPaths.js"
import { type EntryRequest, type EntryResponse } from "../../telephony/entry/EntryWire.js"
import { afterStreamEntry } from "../../telephony/entry/AfterStreamEntry.js"
import { telnyxCallControlEntry } from "../../telephony/entry/TelnyxCallControlEntry.js"
import { telnyxTexmlEntry } from "../../telephony/entry/TelnyxTexmlEntry.js"
import { twilioVoiceEntry } from "../../telephony/entry/TwilioVoiceEntry.js"
import { telnyxTransferEventsEntry, transferOutcomeEntry, transferProgressEntry } from "../../telephony/entry/TransferCallbacks.js"
import type { TransferOutcomes } from "../../sessions/TransferOutcomes.js"
import type { Carriers } from "../../kernel/Carrier.js"
import type { CallRelocation } from "../../telephony/entry/CallRelocation.js"
import { hangupTwiml } from "../../twiml/TwimlBuilder.js"

/** What the call entry endpoints need from the app's runtime. */
export type TelephonyEntryServices =
  | AppConfig
  | PublicUrl
  | Environments
  | SessionTokens
  | CarrierCallEvents
  | TelnyxCarrier
  | TelnyxCallCommands
  | TelnyxTwimlRunner
  | LiveCalls
  | SessionEndJournal
  | AfterStream
  | ErrorFallback
  | EntryBackgroundWork
  | Placement
  | CallLeases
  | AuthThrottle
  | Breaker
  | TransferOutcomes
  | Carriers
  | CallRelocation

const internalError: EntryResponse = {
  status: 500,
  contentType: "text/xml",
  body: hangupTwiml()
}

/**
 * Registers the carriers' call entry webhooks on the app. They are not /v1 JSON routes: they
 * read form-encoded or JSON carrier webhooks (the raw body is kept by the app's content-type
 * parsers for signature checks) and answer TwiML/TeXML or a short JSON acknowledgement.
 */
export const registerTelephonyEntryRoutes = (app: FastifyInstance, runtime: Runtime.Runtime<TelephonyEntryServices>) => {
  const run = Runtime.runPromise(runtime)
  const config = Runtime.runSync(runtime)(AppConfig)
  const throttle = Runtime.runSync(runtime)(AuthThrottle)
  const telnyx = makeTelnyxVerifier(config.telnyxPublicKey)

  if (Option.isNone(config.twilioAuthToken)) {
    run(Effect.logWarning("TWILIO_AUTH_TOKEN is not set: Twilio webhooks and streams are not signature-checked")).catch(() => {})
  }
  if (!telnyx.enabled) {
    run(Effect.logWarning("TELNYX_PUBLIC_KEY is not set: Telnyx webhooks are not signature-checked")).catch(() => {})
  } else if (!telnyx.keyValid) {
    run(Effect.logError("TELNYX_PUBLIC_KEY is not a base64 Ed25519 public key: every Telnyx webhook will be refused")).catch(() => {})
  }

  const toEntryRequest = (request: FastifyRequest): EntryRequest => ({
    url: request.url,
    query: request.query,
    headers: request.headers,
    body: request.body,
    rawBody: request.rawBody
  })

  const route = <E>(path: string, handle: (request: EntryRequest) => Effect.Effect<EntryResponse, E, TelephonyEntryServices>) =>
    // Unauthenticated (signatures are checked inside): a small body limit (docs/security.md).
    app.post(path, { bodyLimit: config.carrierWebhookBodyLimitBytes }, async (request, reply) => {
      const response = await run(
        handle(toEntryRequest(request)).pipe(
          Effect.catchAllCause((cause) =>
            Cause.isInterruptedOnly(cause)
              ? Effect.succeed(internalError)
              : Effect.as(Effect.logError("call entry failed", { route: path }, cause), internalError)
          )
        )
      )
      // A bad signature counts against the address; past its limit it is answered 429. A signed
      // request is answered whatever its address's failures (docs/security.md).
      if (response.status === 401) {
        const wait = throttle.refused(request.ip)
        if (wait !== undefined) return reply.code(429).header("retry-after", String(wait)).send()
      }
      return reply.code(response.status).header("content-type", `${response.contentType}; charset=utf-8`).send(response.body)
    })

  route(EntryPaths.twilioVoice, twilioVoiceEntry)
  route(EntryPaths.telnyxTexml, (request) => telnyxTexmlEntry(request, telnyx.verify))
  route(EntryPaths.telnyxCallControl, (request) => telnyxCallControlEntry(request, telnyx.verify))
  route(EntryPaths.twilioAfterStream, (request) => afterStreamEntry("twilio", request, telnyx.verify))
  route(EntryPaths.telnyxAfterStream, (request) => afterStreamEntry("telnyx-texml", request, telnyx.verify))
  route(EntryPaths.twilioTransferOutcome, (request) => transferOutcomeEntry("twilio", request, telnyx.verify))
  route(EntryPaths.telnyxTransferOutcome, (request) => transferOutcomeEntry("telnyx-texml", request, telnyx.verify))
  route(EntryPaths.twilioTransferProgress, (request) => transferProgressEntry("twilio", request, telnyx.verify))
  route(EntryPaths.telnyxTransferProgress, (request) => transferProgressEntry("telnyx-texml", request, telnyx.verify))
  route(EntryPaths.telnyxTransferEvents, (request) => telnyxTransferEventsEntry(request, telnyx.verify))
}
