import { Schema } from "effect"
import { ResourceId } from "../../environments/EnvironmentSchema.js"

/**
 * The wire formats of the call entry endpoints: what Twilio and Telnyx send when a call arrives,
 * and the query every entry URL carries. Unknown extra fields are ignored (carriers add fields).
 */

/** Where a call goes: `?agentId=..&environmentId=..` on every entry URL. */
export const EntryQuery = Schema.Struct({
  agentId: ResourceId,
  environmentId: ResourceId,
  /** Set by callgate on the URLs of an outbound call it placed: the session the call opens. */
  sessionId: Schema.optional(ResourceId)
})
export type EntryQuery = typeof EntryQuery.Type

const CarrierText = Schema.String.pipe(Schema.maxLength(256))
const CallIdText = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256))

/**
 * Twilio's voice webhook (form-encoded), and Telnyx's TeXML request, which uses the same names.
 * Direction: Twilio says inbound, outbound-api or outbound-dial; Telnyx inbound or outbound.
 */
export const VoiceWebhookForm = Schema.Struct({
  CallSid: CallIdText,
  AccountSid: Schema.optional(CarrierText),
  From: Schema.optional(CarrierText),
  To: Schema.optional(CarrierText),
  Direction: Schema.optional(CarrierText)
}).annotations({ identifier: "VoiceWebhookForm" })
export type VoiceWebhookForm = typeof VoiceWebhookForm.Type

/** Carriers' direction words, as callgate's inbound/outbound. */
export const directionOf = (direction: string | undefined): "inbound" | "outbound" =>
  direction !== undefined && /^outbound|^outgoing/i.test(direction) ? "outbound" : "inbound"

/** The Call Control webhook envelope; `payload` is read per event type below. */
export const CallControlWebhook = Schema.Struct({
  data: Schema.Struct({
    event_type: Schema.String.pipe(Schema.maxLength(128)),
    id: Schema.optional(Schema.String),
    occurred_at: Schema.optional(Schema.String),
    payload: Schema.Record({ key: Schema.String, value: Schema.Unknown })
  })
}).annotations({ identifier: "CallControlWebhook" })
export type CallControlWebhook = typeof CallControlWebhook.Type

/** The payload fields callgate reads from call.initiated, call.answered, call.hangup and streaming.stopped / failed. */
export const CallControlCallPayload = Schema.Struct({
  call_control_id: CallIdText,
  connection_id: Schema.optional(Schema.NullOr(CarrierText)),
  from: Schema.optional(Schema.NullOr(CarrierText)),
  to: Schema.optional(Schema.NullOr(CarrierText)),
  /** incoming or outgoing */
  direction: Schema.optional(Schema.NullOr(CarrierText)),
  hangup_cause: Schema.optional(Schema.NullOr(CarrierText)),
  /** What callgate set on the call (its session id, base64), on every webhook after the stream's start. */
  client_state: Schema.optional(Schema.NullOr(CarrierText))
}).annotations({ identifier: "CallControlCallPayload" })
export type CallControlCallPayload = typeof CallControlCallPayload.Type

/** What an entry endpoint answers: status, content type and body, independent of the HTTP server. */
export interface EntryResponse {
  readonly status: number
  readonly contentType: "text/xml" | "application/json"
  readonly body: string
}

/** What an entry endpoint reads from the HTTP request. */
export interface EntryRequest {
  /** Path and query exactly as received (the signed URL is PUBLIC_URL + this). */
  readonly url: string
  readonly query: unknown
  readonly headers: import("node:http").IncomingHttpHeaders
  /** The parsed body: an object for form and JSON bodies. */
  readonly body: unknown
  readonly rawBody: Buffer | undefined
}

/** Paths of the entry endpoints and of the media streams they point carriers to. */
export const EntryPaths = {
  twilioVoice: "/telephony/twilio/voice",
  twilioStream: "/telephony/twilio/stream",
  telnyxTexml: "/telephony/telnyx/texml",
  telnyxCallControl: "/telephony/telnyx/call-control",
  telnyxStream: "/telephony/telnyx/stream",
  /** Where the entry answer's `<Redirect>` sends a call whose stream ended (docs/reliability.md). */
  twilioAfterStream: "/telephony/twilio/after-stream",
  telnyxAfterStream: "/telephony/telnyx/after-stream"
} as const

/** The `<Redirect>` URL's query: the call's environment and the session the entry minted for it. */
export const AfterStreamQuery = Schema.Struct({ agentId: ResourceId, environmentId: ResourceId, sessionId: ResourceId })
export type AfterStreamQuery = typeof AfterStreamQuery.Type
