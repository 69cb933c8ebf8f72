import { Data, Schema } from "effect"
import type { Session } from "../sessions/SessionSchema.js"
import { rfc2822At } from "../kernel/Time.js"

/**
 * The wire of the Twilio-compatible call-control API (docs/calls.md, "Controlling a call from the
 * agent"): the form Twilio's live-call update accepts, the Call resource JSON and Twilio's error
 * JSON, shaped so the official Twilio SDKs parse them.
 */

export const TWILIO_API_VERSION = "2010-04-01"

/** Twilio's live-call update fields callgate acts on; every other field Twilio accepts is ignored. */
export const CallUpdateForm = Schema.Struct({
  Status: Schema.optional(Schema.String),
  Twiml: Schema.optional(Schema.String),
  Url: Schema.optional(Schema.String),
  Method: Schema.optional(Schema.String)
})
export type CallUpdateForm = typeof CallUpdateForm.Type

/** A failure answered as Twilio answers it: `{code, message, more_info, status}` with HTTP `status`. */
export class TwilioRestError extends Data.TaggedError("TwilioRestError")<{
  readonly status: number
  readonly code: number
  readonly message: string
}> {
  toBody() {
    return { code: this.code, message: this.message, more_info: `https://www.twilio.com/docs/errors/${this.code}`, status: this.status }
  }
}

export const TwilioErrors = {
  authenticate: () => new TwilioRestError({ status: 401, code: 20003, message: "Authenticate" }),
  notFound: (path: string) => new TwilioRestError({ status: 404, code: 20404, message: `The requested resource ${path} was not found` }),
  notInProgress: () => new TwilioRestError({ status: 400, code: 21220, message: "Call is not in-progress. Cannot redirect." }),
  nothingToDo: () => new TwilioRestError({ status: 400, code: 21201, message: "No 'Url', 'Twiml' or 'Status' parameter provided" }),
  invalidStatus: (status: string) =>
    new TwilioRestError({ status: 400, code: 21218, message: `Invalid Status: '${status}' is not one of completed, canceled` }),
  invalidTwiml: (reason: string) => new TwilioRestError({ status: 400, code: 12100, message: `Document parse failure: ${reason}` }),
  retrievalFailed: (reason: string) => new TwilioRestError({ status: 400, code: 11200, message: `HTTP retrieval failure: ${reason}` }),
  carrierFailed: (reason: string) => new TwilioRestError({ status: 502, code: 20500, message: `The carrier refused the update: ${reason}` }),
  badRequest: (reason: string) => new TwilioRestError({ status: 400, code: 20400, message: `Bad request: ${reason}` }),
  tooLarge: (limit: number) => new TwilioRestError({ status: 413, code: 20413, message: `Request entity too large: at most ${limit} bytes` }),
  unsupportedMediaType: () =>
    new TwilioRestError({ status: 415, code: 20415, message: "Unsupported Media Type: send application/x-www-form-urlencoded, UTF-8" }),
  tooManyRequests: () => new TwilioRestError({ status: 429, code: 20429, message: "Too Many Requests" }),
  internal: () => new TwilioRestError({ status: 500, code: 20500, message: "Internal Server Error" })
} as const

/** Twilio's call statuses, from a stored session. */
export const twilioStatusOf = (session: Session): string => {
  switch (session.status) {
    case "queued":
    case "ringing":
      return session.status
    case "active":
      return "in-progress"
    default:
      switch (session.endReason) {
        case "busy":
          return "busy"
        case "no_answer":
          return "no-answer"
        case "canceled":
          return "canceled"
        case "carrier_failed":
          return "failed"
        default:
          return "completed"
      }
  }
}

const rfc2822 = (iso: string | null) => (iso === null ? null : rfc2822At(iso))

/** The Call resource as Twilio's REST API answers it, for one callgate session. */
export const callResource = (session: Session, accountSid: string) => {
  const ended = session.endedAt !== null ? Date.parse(session.endedAt) : undefined
  const uri = `/${TWILIO_API_VERSION}/Accounts/${accountSid}/Calls/${session.id}.json`
  return {
    sid: session.id,
    account_sid: accountSid,
    parent_call_sid: null,
    date_created: rfc2822(session.createdAt),
    date_updated: rfc2822(session.endedAt ?? session.createdAt),
    to: session.to ?? "",
    to_formatted: session.to ?? "",
    from: session.from ?? "",
    from_formatted: session.from ?? "",
    phone_number_sid: null,
    status: twilioStatusOf(session),
    start_time: rfc2822(session.createdAt),
    end_time: rfc2822(session.endedAt),
    duration: ended !== undefined ? String(Math.max(0, Math.round((ended - Date.parse(session.createdAt)) / 1000))) : null,
    price: null,
    price_unit: "USD",
    direction: session.direction === "inbound" ? "inbound" : "outbound-api",
    answered_by: null,
    api_version: TWILIO_API_VERSION,
    forwarded_from: null,
    group_sid: null,
    caller_name: null,
    queue_time: "0",
    trunk_sid: null,
    uri,
    subresource_uris: {}
  }
}
