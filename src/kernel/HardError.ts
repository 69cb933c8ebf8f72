import { Data } from "effect"

/**
 * What went wrong, for the fallback and for the session's `endReason`. Agent-side kinds mean the
 * agent cannot serve the caller; carrier-side kinds mean the media stream broke.
 */
export type HardErrorKind =
  /** No dial-in agent socket was idle for the environment when the call arrived. */
  | "no_idle_agent"
  /** The environment's agentUrl could not be reached (refused, timed out, bad handshake). */
  | "agent_dial_failed"
  /** The agent's socket closed or died during the call. */
  | "agent_disconnected"
  /** The agent sent `{"event":"error"}`. */
  | "agent_error"
  /** The agent sent something that is not the agent dialect. */
  | "agent_protocol_error"
  /** The agent stopped reading: its socket's send buffer overflowed. */
  | "agent_backpressure"
  /** The breaker found the agent not responding (recorded by the breaker, acted on here). */
  | "agent_unresponsive"
  /** The carrier stream reported an error (Telnyx `error` frame) or its socket failed. */
  | "carrier_stream_error"
  /** The carrier sent malformed, unknown or irreparably out-of-order frames. */
  | "carrier_protocol_error"
  /** The agent asked for a transfer and the carrier refused it. */
  | "transfer_failed"
  /** The agent's TwiML (Twilio-compatible call-control API) was refused by the carrier. */
  | "twiml_failed"
  /** The environment the call was issued for no longer exists. */
  | "environment_not_found"
  /** callgate is shutting down and the drain timeout ran out. */
  | "shutdown"
  /** The instance serving the call stopped (crash, machine loss) before the session ended; another run or instance rescued it. */
  | "instance_lost"
  /** The environment's maxConcurrentCalls was reached across the fleet when the call arrived. */
  | "concurrency_limit"
  /** The environment's breaker was open when the call arrived: the call was shed at the entry (docs/fallback.md, "Shedding"). */
  | "breaker_open"
  /** A bug in callgate. */
  | "internal"

/**
 * The one typed error a live call can hit. The session's trigger turns every such failure into
 * this value and hands it to `Rescue` (the action), exactly once per session. `message` is a
 * human sentence without secrets: it becomes the fallback webhook's ErrorMessage.
 */
export class HardError extends Data.TaggedError("HardError")<{
  readonly kind: HardErrorKind
  readonly message: string
}> {}
