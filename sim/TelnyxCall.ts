import { type KeyObject, sign } from "node:crypto"
import { entryUrl, followRedirectAfterStream, onGatewayOrigin, postEntryWebhook, telnyxCallControlId, uuid } from "./CallEntry.js"
import { telnyxDialect } from "./CarrierDialect.js"
import { SimCall, type SimCallOptions, SimError } from "./SimCall.js"
import { codecOfStreamAttributes, isSimStreamCodec, simAudioCodec, SIM_STREAM_CODECS, type SimStreamCodec } from "./StreamCodec.js"

export interface TelnyxStreamOptions extends SimCallOptions {
  /** The stream WebSocket URL (ws:// or wss://), e.g. the `stream_url` of a Call Control answer. */
  readonly url: string
  /** Sent as the `x-telnyx-streaming-auth-token` upgrade header and in the `connected` frame. */
  readonly streamAuthToken?: string
  readonly callControlId?: string
  readonly callSessionId?: string
  readonly streamId?: string
  readonly from?: string
  readonly to?: string
  readonly customParameters?: Readonly<Record<string, string>>
  readonly clientState?: string
  /** `start.media_format.encoding`; default `PCMU`. */
  readonly encoding?: "PCMU" | "audio/x-mulaw"
  /** The codec streamed both ways (what the Call Control answer asked for); default 8 kHz PCMU. */
  readonly codec?: SimStreamCodec
}

/** The dialect's media format and the call's codec conversion for `codec` (none for PCMU). */
const codecSettings = (codec: SimStreamCodec | undefined) => {
  if (codec === undefined || codec === "PCMU") return {}
  const audioCodec = simAudioCodec(codec)
  return { mediaFormat: audioCodec.mediaFormat, audioCodec }
}

/**
 * Opens a Telnyx media stream straight to `url`: what Telnyx does after a Call Control `answer`
 * (or `streaming_start`) names a `stream_url`, and what the benchmark does against a bare relay.
 */
export const connectTelnyxStream = async (options: TelnyxStreamOptions): Promise<SimCall> => {
  const codec = codecSettings(options.codec)
  const dialect = telnyxDialect({
    streamId: options.streamId ?? uuid(),
    callControlId: options.callControlId ?? telnyxCallControlId(),
    callSessionId: options.callSessionId ?? uuid(),
    userId: uuid(),
    from: options.from ?? "+15550100001",
    to: options.to ?? "+15550100002",
    customParameters: options.customParameters ?? {},
    clientState: options.clientState,
    encoding: options.encoding,
    streamAuthToken: options.streamAuthToken,
    mediaFormat: codec.mediaFormat
  })
  const auth: Record<string, string> = options.streamAuthToken !== undefined ? { "x-telnyx-streaming-auth-token": options.streamAuthToken } : {}
  const call = new SimCall(options.url, dialect, { ...options, headers: { ...auth, ...options.headers }, ...(codec.audioCodec ? { audioCodec: codec.audioCodec } : {}) })
  await call.open()
  return call
}

/**
 * Telnyx webhook signature headers: Ed25519 over `<timestamp>|<raw body>`, base64, with the
 * timestamp in Unix seconds.
 */
export const telnyxSignatureHeaders = (privateKey: KeyObject, body: string, timestamp = Math.floor(Date.now() / 1000)) => ({
  "telnyx-signature-ed25519": sign(null, Buffer.from(`${timestamp}|${body}`), privateKey).toString("base64"),
  "telnyx-timestamp": String(timestamp)
})

export interface TelnyxTexmlCallOptions extends SimCallOptions {
  readonly gatewayUrl: string
  readonly agentId: string
  readonly environmentId: string
  readonly from?: string
  readonly to?: string
  /** TeXML CallSid (a call control id); generated when absent. */
  readonly callSid?: string
  readonly accountSid?: string
  /** Signs the webhook with this Ed25519 private key, for a gateway that checks Telnyx signatures. */
  readonly signingKey?: KeyObject
  /** Or: any headers computed from the raw body (e.g. a fake Telnyx account's signer). */
  readonly webhookHeaders?: (rawBody: string) => Record<string, string>
  readonly streamVia?: "texml" | "gateway"
  readonly encoding?: "PCMU" | "audio/x-mulaw"
  /**
   * The codec to stream both ways. Default: what the answer's `<Stream>` asks for (`codec`,
   * `bidirectionalSamplingRate`), as Telnyx does; a codec the simulator cannot stream is an error.
   */
  readonly codec?: SimStreamCodec
  readonly webhookParams?: Readonly<Record<string, string>>
  /** Custom parameters on the TeXML URL's query (`&lang=es`). */
  readonly entryParameters?: Readonly<Record<string, string>>
  /** Like Telnyx, go on to the TeXML's `<Redirect>` when the gateway ends the stream (see placeTwilioCall); signed like the webhook. */
  readonly followRedirect?: boolean
}

/**
 * Places a simulated inbound call through a Telnyx TeXML application: posts the TeXML webhook,
 * follows `<Connect><Stream url>` (whose URL carries the session token) and speaks Telnyx's
 * media-stream dialect on it.
 */
export const placeTelnyxTexmlCall = async (options: TelnyxTexmlCallOptions): Promise<SimCall> => {
  const callSid = options.callSid ?? telnyxCallControlId()
  const callSessionId = uuid()
  const from = options.from ?? "+15550100001"
  const to = options.to ?? "+15550100002"
  const params: Record<string, string> = {
    CallSid: callSid,
    CallSessionId: callSessionId,
    AccountSid: options.accountSid ?? uuid(),
    ConnectionId: "1684641123236054244",
    From: from,
    To: to,
    Direction: "inbound",
    CallStatus: "ringing",
    ...options.webhookParams
  }
  const body = new URLSearchParams(params).toString()
  const headers: Record<string, string> = {
    ...(options.signingKey ? telnyxSignatureHeaders(options.signingKey, body) : {}),
    ...options.webhookHeaders?.(body)
  }
  const answer = await postEntryWebhook(entryUrl(options.gatewayUrl, "telephony/telnyx/texml", options.agentId, options.environmentId, options.entryParameters), params, headers, body)
  const connectUrl = options.streamVia === "gateway" ? onGatewayOrigin(answer.stream.url, options.gatewayUrl) : answer.stream.url
  const asked = options.codec ?? codecOfStreamAttributes(answer.stream.attributes)
  if (!isSimStreamCodec(asked)) {
    throw new SimError(`the <Stream> asks for ${asked}, which the simulator cannot stream (it streams ${SIM_STREAM_CODECS.join(", ")})`, "markup")
  }
  const codec = codecSettings(asked)
  const dialect = telnyxDialect({
    streamId: uuid(),
    callControlId: callSid,
    callSessionId,
    userId: uuid(),
    from,
    to,
    customParameters: answer.stream.parameters,
    encoding: options.encoding,
    mediaFormat: codec.mediaFormat
  })
  const call = new SimCall(connectUrl, dialect, { ...options, ...(codec.audioCodec ? { audioCodec: codec.audioCodec } : {}) })
  call.entry = { ...answer, connectUrl }
  if (options.followRedirect === true) {
    followRedirectAfterStream(call, {
      params,
      headers: (_url, redirectBody) => ({
        ...(options.signingKey ? telnyxSignatureHeaders(options.signingKey, redirectBody) : {}),
        ...options.webhookHeaders?.(redirectBody)
      }),
      ...(options.streamVia === "gateway" ? { via: options.gatewayUrl } : {})
    })
  }
  await call.open()
  return call
}
