import { Schema } from "effect"
import { xmlRootName } from "../twiml/TwimlDocument.js"

/**
 * The error fallback webhook's wire format (docs/fallback.md, "The fallback webhook"): where it is sent, what it
 * carries, and how its answer is read. Pure: the sending lives in ErrorFallback.
 */
export const FallbackWebhookBody = Schema.Struct({
  CallSid: Schema.String,
  ErrorMessage: Schema.String,
  AccountSid: Schema.String,
  From: Schema.String,
  To: Schema.String,
  Direction: Schema.String,
  CallStatus: Schema.String,
  StreamSid: Schema.String,
  SessionId: Schema.String,
  AgentId: Schema.String,
  EnvironmentId: Schema.String,
  Provider: Schema.Literal("twilio", "telnyx")
}).annotations({ identifier: "FallbackWebhookBody" })
export type FallbackWebhookBody = typeof FallbackWebhookBody.Type

/**
 * `value?error=<message>`, keeping the URL's own query parameters. The message is percent-encoded
 * (encodeURIComponent), not form-encoded, so a receiver decoding with decodeURIComponent or a
 * query parser gets the same text.
 */
export const fallbackUrl = (value: string, errorMessage: string): string => {
  const url = new URL(value)
  const param = `error=${encodeURIComponent(errorMessage)}`
  url.search = url.search.length > 1 ? `${url.search}&${param}` : `?${param}`
  return url.toString()
}

/** The answer of a fallback webhook, read as docs/fallback.md, "The fallback webhook", says. */
export type FallbackAnswer =
  /** 2xx with a telephony-markup document whose root is <Response>: apply it to the live call. */
  | { readonly _tag: "Markup"; readonly twiml: string }
  /** 2xx that is anything else: logged as unexpected, the call terminates. */
  | { readonly _tag: "Unexpected"; readonly reason: string }
  /** Non-2xx: a webhook failure, the call terminates. */
  | { readonly _tag: "Failed"; readonly reason: string }

/** The most of a fallback answer that is read; a larger body is not applied. */
export const MAX_FALLBACK_BODY_BYTES = 64 * 1024

export const classifyFallbackAnswer = (answer: {
  readonly status: number
  readonly body: string
  readonly truncated: boolean
}): FallbackAnswer => {
  if (answer.status < 200 || answer.status > 299) return { _tag: "Failed", reason: `HTTP ${answer.status}` }
  if (answer.truncated) return { _tag: "Unexpected", reason: `body larger than ${MAX_FALLBACK_BODY_BYTES} bytes` }
  if (answer.body.trim().length === 0) return { _tag: "Unexpected", reason: "empty body" }
  const root = xmlRootName(answer.body)
  if (root === undefined) return { _tag: "Unexpected", reason: "body is not an XML document" }
  if (root !== "Response") return { _tag: "Unexpected", reason: `XML root is <${root}>, not <Response>` }
  return { _tag: "Markup", twiml: answer.body.trim() }
}
