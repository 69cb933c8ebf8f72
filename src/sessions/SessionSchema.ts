import { Schema } from "effect"
import { ResourceId } from "../environments/EnvironmentSchema.js"
import { FallbackRecord } from "../fallback/FallbackRecord.js"
import { TurnRecord } from "../turns/TurnRecord.js"
import { AgentFailovers, AnsweredBy, SessionRecording, TransferRecord } from "../webhooks/SessionEndedEvent.js"

/**
 * A call session as stored and as /v1 serves it. `turns` is filled by the turn tracker and
 * `fallback` by the error fallback.
 */
export const SessionStatus = Schema.Literal("queued", "ringing", "active", "completed", "failed", "timeout").annotations({
  message: () => "must be one of queued, ringing, active, completed, failed, timeout"
})
export type SessionStatus = typeof SessionStatus.Type

/** Statuses of a session that has not ended: an outbound call placed (queued, ringing), or a live call. */
export const isOpenStatus = (status: SessionStatus): boolean => status === "queued" || status === "ringing" || status === "active"

/**
 * A transfer callgate asked the carrier for whose outcome has not come yet (docs/fallback.md,
 * "Transfer outcomes"). Written before the carrier request, so an outcome that comes back at once
 * always finds it; what the caller hears if it fails travels with it, so any instance can answer.
 */
export const PendingTransfer = Schema.Struct({
  to: Schema.String,
  initiatedBy: Schema.Literal("agent", "fallback"),
  startedAt: Schema.String.annotations({ description: "ISO 8601: when callgate asked the carrier to transfer" }),
  answeredAt: Schema.NullOr(Schema.String).annotations({ description: "ISO 8601: when the carrier reported the number answered" }),
  failedMessage: Schema.NullOr(Schema.String).annotations({
    description: "The environment's transferFailedMessage when the transfer began (fallback transfers only)"
  })
}).annotations({ identifier: "PendingTransfer" })
export type PendingTransfer = typeof PendingTransfer.Type

/** One agent leg of a session: the agent that held the call from `startedAt` to `endedAt` (docs/reliability.md, "Agent failover"). */
export const AgentLeg = Schema.Struct({
  startedAt: Schema.String.annotations({ description: "ISO 8601: when the agent was sent `start`" }),
  endedAt: Schema.NullOr(Schema.String.annotations({ description: "ISO 8601: when the leg ended; null while it holds the call" })),
  endReason: Schema.NullOr(
    Schema.String.annotations({
      description: "Why the leg ended: a hard error kind (agent_disconnected, agent_error, agent_unresponsive, ...) for a leg a failover replaced, else the session's endReason; null while it holds the call"
    })
  ),
  instanceId: Schema.String.annotations({ description: "The callgate instance the agent was connected to" })
}).annotations({ identifier: "AgentLeg" })
export type AgentLeg = typeof AgentLeg.Type

export const Session = Schema.Struct({
  id: Schema.String,
  agentId: Schema.String,
  environmentId: Schema.String,
  provider: Schema.Literal("twilio", "telnyx"),
  callId: Schema.String.annotations({ description: "The carrier's call id: Twilio CallSid, Telnyx call_control_id or TeXML CallSid" }),
  from: Schema.NullOr(Schema.String),
  to: Schema.NullOr(Schema.String),
  direction: Schema.Literal("inbound", "outbound"),
  createdAt: Schema.String.annotations({ description: "ISO 8601: when the media stream started" }),
  endedAt: Schema.NullOr(Schema.String),
  status: SessionStatus,
  endReason: Schema.NullOr(
    Schema.String.annotations({
      description:
        "caller_hangup, agent_hangup, agent_closed, agent_transfer, max_duration, for an unanswered outbound call busy, no_answer, carrier_failed or canceled, or the hard error kind (no_idle_agent, agent_disconnected, ...)"
    })
  ),
  turns: Schema.Array(TurnRecord).annotations({ description: "Caller turns and agent response latencies" }),
  fallback: Schema.NullOr(FallbackRecord).annotations({ description: "What the error fallback did, when it ran" }),
  metadata: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String })).annotations({
    description: "An outbound call's metadata, as given when it was placed (also in the agent's start customParameters)"
  }),
  instanceId: Schema.optional(
    Schema.String.annotations({ description: "The callgate instance that served the call (INSTANCE_ID); absent on records written before it was kept" })
  ),
  callKind: Schema.optional(
    Schema.Literal("twilio", "telnyx-texml", "telnyx-call-control").annotations({
      description: "How the call reached callgate, which decides how another instance reaches it through the carrier's REST API"
    })
  ),
  accountSid: Schema.optional(Schema.String.annotations({ description: "The carrier account of the call, when its REST path needs it" })),
  recording: Schema.optional(SessionRecording.annotations({ description: "The call's recording, once its file is complete (docs/recording.md)" })),
  answeredBy: Schema.optional(AnsweredBy),
  transfers: Schema.optional(
    Schema.Array(TransferRecord).annotations({ description: "The call's transfers with their outcomes (docs/fallback.md, \"Transfer outcomes\")" })
  ),
  pendingTransfer: Schema.optional(
    PendingTransfer.annotations({ description: "A transfer ringing or talking whose outcome has not come yet; session.ended waits for it" })
  ),
  awaitingStreamUntil: Schema.optional(
    Schema.String.annotations({
      description:
        "ISO 8601: the caller is on the way back from an agent's transfer that was not answered and the stream that takes them back has not opened yet; a session still waiting at this time is ended failed / return_stream_timeout (docs/fallback.md, \"The return path\")"
    })
  ),
  answeredByDetail: Schema.optional(Schema.String.annotations({ description: "The carrier's own verdict (Twilio AnsweredBy, Telnyx result)" })),
  agentLegs: Schema.optional(
    Schema.Array(AgentLeg).annotations({
      description: "The agents that held the call, in order: more than one when the call failed over (docs/reliability.md, \"Agent failover\"); absent before an agent was connected"
    })
  ),
  agentFailovers: Schema.optional(AgentFailovers),
  streamRef: Schema.optional(
    Schema.String.annotations({
      description:
        "A Call Control call's current media stream, as callgate names it (the id of the single-use token in its stream_url); a stopped stream with another one is an old stream of a call that moved to another instance (docs/reliability.md, \"Agent failover\")"
    })
  ),
  streamMovingTo: Schema.optional(
    Schema.String.annotations({
      description:
        "A Call Control call whose stream is being moved to this instance by an agent failover: the carrier started the new stream and the instance has not taken the session yet"
    })
  )
}).annotations({ identifier: "Session" })
export type Session = typeof Session.Type

export const SessionParams = Schema.Struct({ agentId: ResourceId, sessionId: ResourceId })

const Limit = Schema.NumberFromString.pipe(
  Schema.int({ message: () => "must be an integer from 1 to 100" }),
  Schema.between(1, 100, { message: () => "must be an integer from 1 to 100" })
)

export const SessionListQuery = Schema.Struct({
  environmentId: Schema.optional(ResourceId),
  status: Schema.optional(SessionStatus),
  limit: Schema.optional(Limit).annotations({ description: "1 to 100, default 20" }),
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(200))).annotations({
    description: "nextCursor from the previous page"
  })
})
export type SessionListQuery = typeof SessionListQuery.Type

export const SessionPageView = Schema.Struct({
  sessions: Schema.Array(Session),
  nextCursor: Schema.NullOr(Schema.String).annotations({ description: "Pass as cursor for the next (older) page; null on the last page" })
}).annotations({ identifier: "SessionPage" })

export const DEFAULT_PAGE_SIZE = 20
