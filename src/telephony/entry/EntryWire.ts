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

/** The query names callgate reads itself: never custom parameters. */
const ENTRY_QUERY_NAMES: ReadonlySet<string> = new Set(["agentId", "environmentId", "sessionId"])

/** Bounds of the custom parameters an entry URL may carry (docs/calls.md, "Custom parameters"). */
export const CUSTOM_PARAMETER_LIMITS = { count: 10, nameLength: 64, valueLength: 256, totalLength: 1024 } as const
const CUSTOM_PARAMETER_NAME = /^[A-Za-z0-9_.-]{1,64}$/

/**
 * The extra query parameters of an entry URL (`...&lang=es&crm=42`), which reach the agent in
 * `start.customParameters`: every name but callgate's own (`agentId`, `environmentId`,
 * `sessionId`). Names are 1 to 64 of `A-Za-z0-9_.-`, values at most 256 characters, at most 10
 * of them and 1024 characters in all, each given once; anything else is a problem (one line, for
 * the log and the 400). They travel inside the session token (signed), and callgate's own start
 * parameters win over a parameter of the same name when the agent's `start` is written.
 */
export const entryCustomParameters = (query: unknown): { readonly parameters: Readonly<Record<string, string>> } | { readonly problem: string } => {
  const parameters: Record<string, string> = {}
  if (typeof query !== "object" || query === null) return { parameters }
  let count = 0
  let total = 0
  for (const [name, value] of Object.entries(query)) {
    if (ENTRY_QUERY_NAMES.has(name)) continue
    if (!CUSTOM_PARAMETER_NAME.test(name) || name === "__proto__") {
      return { problem: `custom parameter name ${JSON.stringify(name.slice(0, 70))} must be 1 to 64 letters, digits, '_', '.' or '-'` }
    }
    if (typeof value !== "string") return { problem: `custom parameter ${name} must be given once` }
    if (value.length > CUSTOM_PARAMETER_LIMITS.valueLength) return { problem: `custom parameter ${name} is longer than 256 characters` }
    if (++count > CUSTOM_PARAMETER_LIMITS.count) return { problem: "more than 10 custom parameters" }
    total += name.length + value.length
    if (total > CUSTOM_PARAMETER_LIMITS.totalLength) return { problem: "custom parameters longer than 1024 characters in all" }
    parameters[name] = value
  }
  return { parameters }
}

const CarrierText = Schema.String.pipe(Schema.maxLength(256))
const CallIdText = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256))
/** A stream URL as callgate gave it to the carrier: its session token makes it longer than other carrier fields. */
const StreamUrlText = Schema.String.pipe(Schema.maxLength(16_384))

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
  client_state: Schema.optional(Schema.NullOr(CarrierText)),
  /** streaming.stopped: the stream's URL (with its session token), the only name Telnyx gives the stream that ended. */
  stream_url: Schema.optional(Schema.NullOr(StreamUrlText)),
  /** streaming.failed: the stream's parameters, its URL among them. */
  stream_params: Schema.optional(Schema.NullOr(Schema.Struct({ stream_url: Schema.optional(Schema.NullOr(StreamUrlText)) })))
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

/** The `<Redirect>` URL's query: the call's environment and the session the entry minted for it. */
export const AfterStreamQuery = Schema.Struct({ agentId: ResourceId, environmentId: ResourceId, sessionId: ResourceId })
export type AfterStreamQuery = typeof AfterStreamQuery.Type
