import { Schema } from "effect"

/** A finished recording of the call (docs/recording.md): where /v1 serves it, how long it is, and the paused stretches. */
export const SessionRecording = Schema.Struct({
  url: Schema.String.annotations({ description: "GET /v1/agents/{agentId}/sessions/{sessionId}/recording on this deployment" }),
  durationMs: Schema.Number,
  pauses: Schema.Array(Schema.Struct({ startMs: Schema.Number, endMs: Schema.Number })).annotations({
    description: "Stretches the agent paused (silent on both channels), in ms from the start of the recording"
  })
}).annotations({ identifier: "SessionRecording" })
export type SessionRecording = typeof SessionRecording.Type

/** Who answered an outbound call placed with machine detection (docs/calls.md, "Answering-machine detection"). */
export const AnsweredBy = Schema.Literal("human", "machine", "fax", "unknown").annotations({
  description: "Who answered an outbound call placed with machineDetection: human, machine, fax or unknown"
})

/** How often a session's agent failed over (docs/reliability.md, "Agent failover"): on the session and in session.ended. */
export const AgentFailovers = Schema.Number.annotations({
  description:
    "Agent failovers of the session: times its agent leg ended abnormally and callgate sought another agent instead of ending the call (taken over, or the fallback after agentFailoverTimeout) (docs/reliability.md, \"Agent failover\")"
})

/**
 * One transfer of the call and its outcome as the carrier reported it (docs/fallback.md, "Transfer
 * outcomes"): who asked for it, how long the number rang, how long the caller talked there.
 */
export const TransferRecord = Schema.Struct({
  to: Schema.String.annotations({ description: "The number dialled, E.164" }),
  initiatedBy: Schema.Literal("agent", "fallback").annotations({
    description: "agent: the agent's transfer event; fallback: the environment's phone fallback"
  }),
  status: Schema.Literal("answered", "busy", "no-answer", "failed", "canceled").annotations({
    description: "answered (and talked), busy, no-answer (rang out: TRANSFER_RING_TIMEOUT), failed (could not be placed), canceled (the caller hung up while it rang)"
  }),
  ringMs: Schema.Number.annotations({ description: "From the transfer request to the answer (or to the end, when not answered)" }),
  talkMs: Schema.Number.annotations({ description: "From the answer to the hang-up; 0 when not answered" }),
  startedAt: Schema.String.annotations({ description: "ISO 8601: when callgate asked the carrier to transfer" }),
  endedAt: Schema.String.annotations({ description: "ISO 8601: when the outcome was known" }),
  carrierStatus: Schema.NullOr(Schema.String).annotations({
    description:
      "The carrier's own word (Twilio/TeXML DialCallStatus, Telnyx hangup_cause); null when no outcome came within the bound and callgate closed it (docs/fallback.md, \"When the outcome never comes\")"
  }),
  transferFailedMessage: Schema.Boolean.annotations({
    description: "True when the environment's transferFailedMessage was spoken to the caller before the hang-up"
  })
}).annotations({ identifier: "TransferRecord" })
export type TransferRecord = typeof TransferRecord.Type

/** The `session.ended` payload (docs/webhooks.md, "The request"). */
export const SessionEndedEvent = Schema.Struct({
  event: Schema.Literal("session.ended"),
  sessionId: Schema.String,
  agentId: Schema.String,
  environmentId: Schema.String,
  status: Schema.String.annotations({ description: "completed, failed or timeout" }),
  createdAt: Schema.String.annotations({ description: "ISO 8601" }),
  agentPhoneNumber: Schema.optional(Schema.String),
  clientPhoneNumber: Schema.optional(Schema.String),
  duration: Schema.optional(Schema.String.annotations({ description: "Whole seconds, as a string" })),
  direction: Schema.Literal("inbound", "outbound"),
  provider: Schema.optional(Schema.Literal("twilio", "telnyx")),
  callId: Schema.optional(Schema.String),
  endReason: Schema.optional(Schema.String),
  recording: Schema.optional(SessionRecording.annotations({ description: "Present when the call was recorded and its file is complete" })),
  answeredBy: Schema.optional(AnsweredBy),
  transfers: Schema.optional(
    Schema.Array(TransferRecord).annotations({
      description: "The call's transfers with their outcomes; present when the call was transferred. session.ended is sent once the last one's outcome is known"
    })
  ),
  agentFailovers: Schema.optional(AgentFailovers)
}).annotations({ identifier: "SessionEndedEvent" })
export type SessionEndedEvent = typeof SessionEndedEvent.Type

// The receiver package's plain type (packages/webhooks) describes this very payload: each must take the other.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false
type Plain = import("../../packages/webhooks/src/index.js").SessionEndedEvent
const _sameShape: Same<SessionEndedEvent, Plain> = true
void _sameShape
