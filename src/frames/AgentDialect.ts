import { ParseResult, Schema } from "effect"
import { E164 } from "../environments/EnvironmentSchema.js"
import { type Checkpoint, MAX_CHECKPOINT_BYTES } from "../kernel/CallLegs.js"
import {
  isTwilioOutboundMarkFrame,
  isTwilioOutboundMediaFrame,
  twilioOutboundMediaScanner,
  TwilioClear,
  TwilioConnected,
  TwilioDtmf,
  TwilioMark,
  TwilioMedia,
  TwilioOutboundMark,
  TwilioOutboundMedia,
  TwilioStart,
  TwilioStop
} from "./TwilioFrames.js"

/**
 * The agent dialect, in one place: Twilio Media Streams, so a Twilio-stream bot works unchanged,
 * plus three extensions from the agent. See docs/calls.md, "Agents".
 *
 * callgate -> agent: `connected`, `start` (customParameters: sessionId, agentId, environmentId,
 * from, to, from_number, to_number, direction, provider, answeredBy when machine detection already
 * answered, and the entry URL's custom parameters), `media`, `dtmf`, `mark` (echoes), `amd` (the
 * machine-detection verdict after `start`), `stop`; then callgate closes.
 * agent -> callgate: `media`, `mark`, `clear`, and `hangup`, `transfer`, `error`, `recording`, `checkpoint`.
 */
export const AgentHangup = Schema.Struct({ event: Schema.Literal("hangup") })

export const AgentTransfer = Schema.Struct({
  event: Schema.Literal("transfer"),
  transfer: Schema.Struct({ to: E164 })
})

export const AgentError = Schema.Struct({
  event: Schema.Literal("error"),
  error: Schema.Struct({ message: Schema.String.pipe(Schema.maxLength(1000)) })
})

/**
 * Pause (true) or resume (false) the call's recording (docs/recording.md, "Pausing"). Handled apart
 * from the other messages: a malformed one is answered with `error` and the call goes on.
 */
export const AgentRecording = Schema.Struct({
  event: Schema.Literal("recording"),
  recording: Schema.Struct({ paused: Schema.Boolean })
})
export const isRecordingEvent = (raw: unknown): boolean =>
  typeof raw === "object" && raw !== null && (raw as { event?: unknown }).event === "recording"
const decodeRecording = Schema.decodeUnknownEither(AgentRecording, { onExcessProperty: "error" })
/** The `paused` flag of a recording event, or why it is not one (the text of the `error` sent back). */
export const recordingPausedOf = (raw: unknown): boolean | string => {
  const decoded = decodeRecording(raw)
  return decoded._tag === "Right"
    ? decoded.right.recording.paused
    : 'invalid recording event: expected {"event":"recording","recording":{"paused":true|false}}'
}

/**
 * The agent's checkpoint (docs/calls.md, "Checkpoints"): any JSON object of at most 16 KiB serialized,
 * kept with the session (the latest one) for the agent that takes the call over. Handled apart from
 * the other messages, like `recording`: one that is not an object or too large is answered with
 * `error` and the call goes on. Fields beside `event` and `checkpoint` (a bot's `streamSid`) are ignored.
 */
export const AgentCheckpoint = Schema.Struct({
  event: Schema.Literal("checkpoint"),
  // A Record refuses arrays and null: only a JSON object passes.
  checkpoint: Schema.Record({ key: Schema.String, value: Schema.Unknown }).pipe(
    Schema.filter((value) => checkpointBytes(value) <= MAX_CHECKPOINT_BYTES, {
      message: (issue) => `the checkpoint takes ${checkpointBytes(issue.actual as Checkpoint)} bytes serialized, more than ${MAX_CHECKPOINT_BYTES}`
    })
  )
})
/** The UTF-8 bytes of a checkpoint serialized, as the limit counts them. */
export const checkpointBytes = (checkpoint: Checkpoint): number => Buffer.byteLength(JSON.stringify(checkpoint), "utf8")
export const isCheckpointEvent = (raw: unknown): boolean =>
  typeof raw === "object" && raw !== null && (raw as { event?: unknown }).event === "checkpoint"
const decodeCheckpoint = Schema.decodeUnknownEither(AgentCheckpoint)
const CHECKPOINT_SHAPE = 'expected {"event":"checkpoint","checkpoint":{...}} with a JSON object'
/** The checkpoint of a checkpoint event, or why it is refused (the text of the `error` sent back). */
export const checkpointIn = (raw: unknown): Checkpoint | string => {
  const decoded = decodeCheckpoint(raw)
  if (decoded._tag === "Right") return decoded.right.checkpoint
  const issue = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)[0]
  // The size filter's own words; anything else (missing, an array, a string, null) is a wrong shape.
  const refined = issue !== undefined && issue._tag === "Refinement" && issue.path.length === 1
  return `invalid checkpoint: ${refined ? issue.message : CHECKPOINT_SHAPE}`
}

/** callgate -> agent: a request callgate refused without ending the call (a malformed `recording` or `checkpoint` event). */
export const CallgateError = Schema.Struct({
  event: Schema.Literal("error"),
  error: Schema.Struct({ message: Schema.String })
})
export const callgateErrorFrame = (message: string): string => JSON.stringify({ event: "error", error: { message } })

/** Everything an agent may send. */
export const AgentMessage = Schema.Union(TwilioOutboundMedia, TwilioOutboundMark, TwilioClear, AgentHangup, AgentTransfer, AgentError)
export type AgentMessage = typeof AgentMessage.Type
export const AGENT_MESSAGE_EVENTS: ReadonlySet<string> = new Set(["media", "mark", "clear", "hangup", "transfer", "error"])

/** The media frame an agent sends, and its hot-path guard (`Schema.is(AgentMedia)`, hand-written). */
export const AgentMedia = TwilioOutboundMedia
export const isAgentMediaFrame = isTwilioOutboundMediaFrame
/** The agent's mark, and its guard (`Schema.is(AgentMark)`, hand-written: a mark skips the full decode). */
export const AgentMark = TwilioOutboundMark
export const isAgentMarkMessage = isTwilioOutboundMarkFrame
/** The agent's media frame exactly as Twilio-stream bots write it (MediaScanner.ts); the rest takes the full parse. */
export const agentMediaScanner = twilioOutboundMediaScanner

/** Everything callgate sends to an agent: Twilio's own frames. */
export const CallgateMessage = Schema.Union(TwilioConnected, TwilioStart, TwilioMedia, TwilioDtmf, TwilioMark, TwilioStop)
export type CallgateMessage = typeof CallgateMessage.Type

/** The `start` customParameters every agent receives. */
export const AgentStartParameters = Schema.Struct({
  sessionId: Schema.String,
  agentId: Schema.String,
  environmentId: Schema.String,
  from: Schema.String,
  to: Schema.String,
  /** `from` again, under the name Pipecat's telephony runner reads. */
  from_number: Schema.String,
  /** `to` again, under the name Pipecat's telephony runner reads. */
  to_number: Schema.String,
  direction: Schema.Literal("inbound", "outbound"),
  provider: Schema.Literal("twilio", "telnyx"),
  /** W3C trace context of the call's session span (docs/observability.md, "Joining an agent's trace"). */
  traceparent: Schema.optional(Schema.String)
})
export type AgentStartParameters = typeof AgentStartParameters.Type
