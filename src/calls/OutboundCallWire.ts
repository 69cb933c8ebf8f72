import { Data, Schema } from "effect"
import type { AnsweredBy, MachineVerdict } from "../kernel/CallLegs.js"
import { E164, ResourceId } from "../environments/EnvironmentSchema.js"

/** `POST /v1/agents/{agentId}/environments/{environmentId}/calls` (docs/calls.md, "Placing outbound calls"). */
export const PlaceCallBody = Schema.Struct({
  to: E164.annotations({ description: "Who to call, E.164" }),
  from: E164.annotations({ description: "The caller id: a number of the carrier account, E.164" }),
  provider: Schema.optional(
    Schema.Literal("twilio", "telnyx").annotations({ message: () => ({ message: "must be one of twilio, telnyx", override: true }) })
  ).annotations({ description: "twilio or telnyx; default OUTBOUND_DEFAULT_PROVIDER" }),
  timeoutSeconds: Schema.optional(
    Schema.Number.pipe(
      Schema.int({ message: () => "must be an integer from 5 to 600" }),
      Schema.between(5, 600, { message: () => "must be an integer from 5 to 600" })
    )
  ).annotations({ description: "How long the call may ring before it counts as no-answer (5 to 600, default 30)" }),
  metadata: Schema.optional(
    Schema.Record({
      key: Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9_.-]{1,64}$/, { message: () => "keys must be 1 to 64 letters, digits, '_', '.' or '-'" })),
      value: Schema.String.pipe(Schema.maxLength(500, { message: () => "values must be at most 500 characters" }))
    }).pipe(Schema.filter((record) => Object.keys(record).length <= 20 || "must have at most 20 keys"))
  ).annotations({ description: "Strings handed to the agent in start.customParameters (callgate's own parameters win on a clash)" }),
  machineDetection: Schema.optional(
    Schema.Literal("off", "detect", "detect-message-end").annotations({
      message: () => ({ message: "must be one of off, detect, detect-message-end", override: true })
    })
  ).annotations({
    description:
      "Answering-machine detection by the carrier: off (default), detect (human or machine as soon as known) or detect-message-end (a machine's verdict once its greeting ended, to leave a message). The verdict reaches the agent as start.customParameters.answeredBy or an amd message, and the session as answeredBy"
  })
}).annotations({ identifier: "PlaceCall", message: () => "must be a JSON object" })
export type PlaceCallBody = typeof PlaceCallBody.Type

export const DEFAULT_RING_TIMEOUT_SECONDS = 30

export const CallParams = Schema.Struct({ agentId: ResourceId, environmentId: ResourceId, sessionId: ResourceId })

/** The environment already has `limit` outbound calls placed or live. */
export class TooManyOutboundCalls extends Data.TaggedError("TooManyOutboundCalls")<{
  readonly environmentId: string
  readonly limit: number
  /** The limit reached (counted across the fleet); absent: maxConcurrentOutboundCalls. */
  readonly setting?: "maxConcurrentCalls" | "maxConcurrentOutboundCalls"
}> {}

/** The carrier of the call is not configured for placing calls. */
export class OutboundNotConfigured extends Data.TaggedError("OutboundNotConfigured")<{
  readonly provider: "twilio" | "telnyx"
  readonly missing: string
}> {}

/** The carrier refused to place the call; the session was recorded as failed (carrier_failed). */
export class OutboundPlacementFailed extends Data.TaggedError("OutboundPlacementFailed")<{
  readonly sessionId: string
  readonly detail: string
}> {}

/** How the carrier said an unanswered call ended, as the session's endReason. */
export type UnansweredReason = "busy" | "no_answer" | "carrier_failed" | "canceled"

/** Twilio's CallStatus of a call that ended without being answered. */
export const twilioUnanswered = (status: string): UnansweredReason | undefined => {
  switch (status) {
    case "busy":
      return "busy"
    case "no-answer":
      return "no_answer"
    case "canceled":
      return "canceled"
    case "failed":
    // completed before callgate's stream ever opened: answered, but it never reached the agent.
    case "completed":
      return "carrier_failed"
    default:
      return undefined
  }
}

/** Telnyx's hangup_cause of an outbound call that was never answered. */
export const telnyxUnanswered = (cause: string | undefined): UnansweredReason => {
  switch (cause) {
    case "busy":
    case "user_busy":
      return "busy"
    case "timeout":
    case "no_answer":
      return "no_answer"
    case "originator_cancel":
      return "canceled"
    default:
      return "carrier_failed"
  }
}

export type MachineDetection = "off" | "detect" | "detect-message-end"


/** Twilio's AnsweredBy: human, machine_start, machine_end_beep, machine_end_silence, machine_end_other, fax, unknown. */
export const twilioVerdict = (answeredBy: string): MachineVerdict => ({
  answeredBy: answeredBy === "human" ? "human" : answeredBy.startsWith("machine") ? "machine" : answeredBy === "fax" ? "fax" : "unknown",
  detail: answeredBy
})

/**
 * Telnyx's detection result (call.machine.detection.ended: human, machine, not_sure; premium:
 * human_residence, human_business, machine, silence, fax_detected, not_sure) as callgate's word.
 */
export const telnyxAnsweredBy = (result: string): AnsweredBy =>
  result === "human" || result.startsWith("human_") ? "human" : result === "machine" ? "machine" : result.startsWith("fax") ? "fax" : "unknown"
