import { Duration, Effect, Option, Redacted } from "effect"
import twilio from "twilio"
import { AppConfig } from "../config/AppConfig.js"
import { isE164 } from "../environments/EnvironmentSchema.js"
import { Metrics } from "../observability/Metrics.js"
import { type CallRef, CarrierError, type CarriersShape, type OutboundDial, type TransferTracking } from "../kernel/Carrier.js"
import { dialTwiml } from "../twiml/TwimlBuilder.js"
import { MAX_TWILIO_TWIML_CHARS } from "../twiml/TwimlDocument.js"
import {
  carrierInstruments,
  type ClassifiedFailure,
  classifyNetworkFailure,
  classifyStatus,
  clip,
  runCarrierRequest,
  runCarrierRequestFor
} from "./CarrierRequest.js"

const TWILIO_ORIGIN = "https://api.twilio.com"

/** Twilio's "Call is not in-progress. Cannot redirect.": the call is over. */
const CALL_NOT_IN_PROGRESS = 21220

/**
 * The twilio SDK has no base-URL option: this request client sends what the SDK addresses to
 * https://api.twilio.com to TWILIO_API_BASE_URL instead (a provider-compatible server in tests).
 */
class BaseUrlRequestClient extends twilio.RequestClient {
  constructor(
    private readonly baseUrl: string,
    options: ConstructorParameters<typeof twilio.RequestClient>[0]
  ) {
    super(options)
  }
  override request<TData>(opts: Parameters<twilio.RequestClient["request"]>[0]) {
    const uri = opts.uri.startsWith(TWILIO_ORIGIN) ? this.baseUrl + opts.uri.slice(TWILIO_ORIGIN.length) : opts.uri
    return super.request<TData>({ ...opts, uri } as Parameters<twilio.RequestClient["request"]>[0] & { data?: TData })
  }
}

/** Reads a Twilio SDK failure; the SDK's errors are never logged whole (axios errors carry the auth header). */
const classifyTwilioFailure = (error: unknown): ClassifiedFailure => {
  const status = typeof (error as { status?: unknown })?.status === "number" ? (error as { status: number }).status : undefined
  if (status === undefined) return classifyNetworkFailure(error)
  const code = (error as { code?: unknown }).code
  const detail = `${typeof code === "number" ? `error ${code}: ` : ""}${clip((error as { message?: unknown }).message)}`
  if (status === 404 || code === CALL_NOT_IN_PROGRESS) return { kind: "ended", status, detail }
  return classifyStatus(status, detail)
}

/**
 * The Twilio side of the `Carriers` port: Programmable Voice through the twilio SDK.
 * hangup = Status=completed; transfer = Twiml with <Dial>; applyTwiml = Twiml as given;
 * place = Calls.create; cancel = Status=canceled.
 */
export class TwilioCarrier extends Effect.Service<TwilioCarrier>()("callgate/TwilioCarrier", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const instruments = carrierInstruments((yield* Metrics).registry)
    const timeoutMs = Duration.toMillis(config.carrierRequestTimeout)

    const client: { readonly sdk: twilio.Twilio; readonly accountSid: string } | string = (() => {
      if (Option.isNone(config.twilioAccountSid) || Option.isNone(config.twilioAuthToken)) {
        return "TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN are not both set"
      }
      try {
        const httpClient = new BaseUrlRequestClient(config.twilioApiBaseUrl, { timeout: timeoutMs, keepAlive: true })
        const sdk = twilio(config.twilioAccountSid.value, Redacted.value(config.twilioAuthToken.value), { httpClient })
        return { sdk, accountSid: config.twilioAccountSid.value }
      } catch (error) {
        return `the Twilio client could not be created: ${clip((error as Error).message)}`
      }
    })()
    if (typeof client === "string") yield* Effect.logInfo(`Twilio REST is disabled: ${client}`)

    const notConfigured = (operation: string) =>
      new CarrierError({ provider: "twilio", operation, detail: `not configured: ${client as string}`, retryable: false })

    const updateCall = (operation: string, call: CallRef, params: { status?: "completed" | "canceled"; twiml?: string }, idempotent: boolean) => {
      if (typeof client === "string") return Effect.fail(notConfigured(operation))
      const account = call.accountSid ?? client.accountSid
      return runCarrierRequest(instruments, {
        provider: "twilio",
        operation,
        callId: call.callId,
        idempotent,
        attempt: Effect.tryPromise({
          try: () => client.sdk.api.v2010.accounts(account).calls(call.callId).update(params),
          catch: classifyTwilioFailure
        })
      })
    }

    const applyDocument = (operation: string, call: CallRef, twiml: string) =>
      twiml.length > MAX_TWILIO_TWIML_CHARS
        ? Effect.fail(
            new CarrierError({
              provider: "twilio",
              operation,
              detail: `the TwiML is ${twiml.length} characters; Twilio accepts at most ${MAX_TWILIO_TWIML_CHARS}`,
              retryable: false,
              unexpected: true
            })
          )
        : // Not repeated after an ambiguous failure: a second update would restart the document.
          updateCall(operation, call, { twiml }, false)

    const hangup = (call: CallRef) => updateCall("hangup", call, { status: "completed" }, true)

    const transfer = (call: CallRef, to: string, callerId?: string, tracking?: TransferTracking) =>
      isE164(to)
        ? applyDocument("transfer", call, dialTwiml(to, callerId !== undefined && isE164(callerId) ? callerId : undefined, tracking))
        : Effect.fail(new CarrierError({ provider: "twilio", operation: "transfer", detail: "the destination is not an E.164 number", retryable: false }))

    const applyTwiml = (call: CallRef, twiml: string) => applyDocument("applyTwiml", call, twiml)

    /** Calls.create; answers the new call. Not repeated after an ambiguous failure: that could place two calls. */
    const place = (dial: OutboundDial): Effect.Effect<CallRef, CarrierError> => {
      if (typeof client === "string") return Effect.fail(notConfigured("placeCall"))
      return runCarrierRequestFor(instruments, {
        provider: "twilio",
        operation: "placeCall",
        callId: "",
        idempotent: false,
        attempt: Effect.tryPromise({
          try: () =>
            client.sdk.api.v2010.accounts(client.accountSid).calls.create({
              to: dial.to,
              from: dial.from,
              url: dial.answerUrl,
              method: "POST",
              statusCallback: dial.statusUrl,
              statusCallbackMethod: "POST",
              statusCallbackEvent: ["initiated", "ringing", "answered", "completed"],
              timeout: dial.timeoutSeconds,
              // Always asynchronous: the callee is connected at once and the verdict is posted to resultUrl.
              ...(dial.machineDetection !== undefined
                ? {
                    machineDetection: dial.machineDetection.mode === "detect" ? "Enable" : "DetectMessageEnd",
                    asyncAmd: "true",
                    asyncAmdStatusCallback: dial.machineDetection.resultUrl,
                    asyncAmdStatusCallbackMethod: "POST"
                  }
                : {})
            }),
          catch: classifyTwilioFailure
        })
      }).pipe(Effect.map((created): CallRef => ({ kind: "twilio", callId: created.sid, accountSid: client.accountSid })))
    }

    /** Cancels a call that is queued or ringing (Twilio: Status=canceled). */
    const cancel = (call: CallRef) => updateCall("cancel", call, { status: "canceled" }, true)

    return { hangup, transfer, applyTwiml, place, cancel } as const satisfies CarriersShape
  })
}) {}
