import { entryUrl, followRedirectAfterStream, onGatewayOrigin, postEntryWebhook, twilioSid, twilioSignature } from "./CallEntry.js"
import { twilioDialect } from "./CarrierDialect.js"
import { SimCall, type SimCallOptions } from "./SimCall.js"

export interface TwilioStreamOptions extends SimCallOptions {
  /** The stream WebSocket URL (ws:// or wss://). */
  readonly url: string
  readonly callSid?: string
  readonly accountSid?: string
  readonly streamSid?: string
  /** Sent back in `start.customParameters`, as Twilio does with the TwiML `<Parameter>`s. */
  readonly customParameters?: Readonly<Record<string, string>>
  /** When set, the upgrade carries X-Twilio-Signature over `signedUrl` (default `url`). */
  readonly authToken?: string
  readonly signedUrl?: string
}

/**
 * Opens a Twilio Media Stream straight to `url`, with no voice webhook first: for relays that are
 * not callgate (the benchmark's bare relay) and for tests that build the stream themselves.
 */
export const connectTwilioStream = async (options: TwilioStreamOptions): Promise<SimCall> => {
  const dialect = twilioDialect({
    streamSid: options.streamSid ?? twilioSid("MZ"),
    accountSid: options.accountSid ?? twilioSid("AC"),
    callSid: options.callSid ?? twilioSid("CA"),
    customParameters: options.customParameters ?? {}
  })
  const signature: Record<string, string> =
    options.authToken !== undefined ? { "X-Twilio-Signature": twilioSignature(options.authToken, options.signedUrl ?? options.url) } : {}
  const call = new SimCall(options.url, dialect, { ...options, headers: { ...signature, ...options.headers } })
  await call.open()
  return call
}

export interface TwilioCallOptions extends SimCallOptions {
  /** The gateway's base URL, e.g. http://127.0.0.1:8080. */
  readonly gatewayUrl: string
  readonly agentId: string
  readonly environmentId: string
  readonly from?: string
  readonly to?: string
  readonly callSid?: string
  readonly accountSid?: string
  /**
   * The account's auth token, when the gateway checks X-Twilio-Signature: the webhook is signed
   * over `publicUrl` + path + query, the upgrade over the stream URL as the TwiML gives it.
   */
  readonly authToken?: string
  /** The base URL the gateway believes it is reached on (its PUBLIC_URL); default `gatewayUrl`. */
  readonly publicUrl?: string
  /** Connect to the TwiML's stream URL as given (`twiml`, default) or moved onto `gatewayUrl`'s origin. */
  readonly streamVia?: "twiml" | "gateway"
  /** More webhook parameters (e.g. CallerName), or overrides of the defaults. */
  readonly webhookParams?: Readonly<Record<string, string>>
  /** Custom parameters on the voice webhook URL's query (`&lang=es`), as a number's webhook may carry them. */
  readonly entryParameters?: Readonly<Record<string, string>>
  /**
   * Like Twilio, go on to the TwiML's `<Redirect>` when the gateway ends the stream (closes it or
   * dies): `call.redirected` has the answer. The request goes where the redirect names (moved onto
   * `gatewayUrl`'s origin with `streamVia: "gateway"`), signed over the URL it names.
   */
  readonly followRedirect?: boolean
}

/**
 * Places a simulated inbound Twilio call: posts the voice webhook as Twilio does, follows the
 * `<Connect><Stream>` in the TwiML answer, and opens the stream with the `<Parameter>`s as
 * custom parameters. The returned call is streaming (silence until audio is played).
 */
export const placeTwilioCall = async (options: TwilioCallOptions): Promise<SimCall> => {
  const callSid = options.callSid ?? twilioSid("CA")
  const accountSid = options.accountSid ?? twilioSid("AC")
  const path = "telephony/twilio/voice"
  const url = entryUrl(options.gatewayUrl, path, options.agentId, options.environmentId, options.entryParameters)
  const params: Record<string, string> = {
    CallSid: callSid,
    AccountSid: accountSid,
    From: options.from ?? "+15550100001",
    To: options.to ?? "+15550100002",
    Caller: options.from ?? "+15550100001",
    Called: options.to ?? "+15550100002",
    Direction: "inbound",
    CallStatus: "ringing",
    ApiVersion: "2010-04-01",
    ...options.webhookParams
  }
  const signedWebhookUrl = entryUrl(options.publicUrl ?? options.gatewayUrl, path, options.agentId, options.environmentId, options.entryParameters)
  const headers: Record<string, string> = options.authToken !== undefined ? { "X-Twilio-Signature": twilioSignature(options.authToken, signedWebhookUrl, params) } : {}
  const answer = await postEntryWebhook(url, params, headers)
  const connectUrl = options.streamVia === "gateway" ? onGatewayOrigin(answer.stream.url, options.gatewayUrl) : answer.stream.url
  const dialect = twilioDialect({ streamSid: twilioSid("MZ"), accountSid, callSid, customParameters: answer.stream.parameters })
  const signature: Record<string, string> =
    options.authToken !== undefined ? { "X-Twilio-Signature": twilioSignature(options.authToken, answer.stream.url) } : {}
  const call = new SimCall(connectUrl, dialect, { ...options, headers: { ...signature, ...options.headers } })
  call.entry = { ...answer, connectUrl }
  if (options.followRedirect === true) {
    followRedirectAfterStream(call, {
      params,
      headers: (url, _body, form): Record<string, string> =>
        options.authToken !== undefined ? { "X-Twilio-Signature": twilioSignature(options.authToken, url, form) } : {},
      ...(options.streamVia === "gateway" ? { via: options.gatewayUrl } : {})
    })
  }
  await call.open()
  return call
}
