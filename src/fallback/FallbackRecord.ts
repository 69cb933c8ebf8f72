import { Schema } from "effect"

export const FallbackOutcome = Schema.Literal(
  /** Type disabled: the call was ended. */
  "hung_up",
  /** Type phone: the call was moved to the fallback number. */
  "transferred",
  /** Type webhook: its <Response> document took the call over. */
  "markup_applied",
  /** Type webhook: a 2xx that was not telephony markup; the call was ended. */
  "unexpected_response",
  /** Type webhook: non-2xx, timeout, refused address or connection failure; the call was ended. */
  "webhook_failed",
  /** The carrier refused the transfer or the markup; the call was ended. */
  "carrier_failed"
)
export type FallbackOutcome = typeof FallbackOutcome.Type

/** What a session records of its error fallback as the session routes show it. */
export const FallbackRecord = Schema.Struct({
  trigger: Schema.String.annotations({ description: "The hard error kind that triggered it, e.g. agent_unresponsive" }),
  errorMessage: Schema.String,
  type: Schema.Literal("disabled", "phone", "webhook"),
  outcome: FallbackOutcome,
  startedAt: Schema.String.annotations({ description: "ISO 8601: when the fallback started (the trigger)" }),
  carrierRequestAt: Schema.NullOr(Schema.String).annotations({
    description: "ISO 8601: when the carrier request that decided the call was sent"
  }),
  finishedAt: Schema.String,
  webhookStatus: Schema.NullOr(Schema.Number).annotations({ description: "The fallback webhook's HTTP status, when it answered" }),
  detail: Schema.NullOr(Schema.String),
  via: Schema.optional(Schema.Literal("rest", "redirect")).annotations({
    description:
      "How the carrier was reached: rest (its REST API acted on the live call), or redirect (the REST request was refused or timed out, so the stream was ended and the answer to the entry's <Redirect> carried the fallback; also a call that came back that way on its own)"
  })
}).annotations({ identifier: "Fallback" })
export type FallbackRecord = typeof FallbackRecord.Type
