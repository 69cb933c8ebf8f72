import type { AudioFormat } from "./AudioFormat.js"
import type { CallKind, Provider } from "./Carrier.js"
import type { HardErrorKind } from "./HardError.js"

/**
 * The internal call-event model: what both carrier dialects (Twilio, Telnyx) turn into and what
 * the agent side speaks to. All methods are synchronous and run once per frame; base64 media
 * payloads stay strings from the socket they arrived on to the one they leave on.
 */

/** A failure reported by one leg; the session turns it into a HardError. */
export interface LegFault {
  readonly kind: HardErrorKind
  readonly message: string
}

/** What the carrier side tells the session (a dialect handler calls these). */
export interface CallerEvents {
  /**
   * One inbound audio frame, in order (Telnyx chunks are re-ordered before this), with the
   * carrier's timestamp (ms since the stream began; -1 when the frame had none).
   */
  callerMedia(payload: string, timestampMs: number): void
  callerDtmf(digit: string): void
  /** The carrier played (or cleared) the audio before a mark: the echo the agent waits for. */
  carrierMark(name: string): void
  /** `stop` frame: the call or stream ended normally. */
  carrierStopped(): void
  /** The carrier socket is gone; `fault` when it broke rather than closed. */
  carrierGone(fault: LegFault | undefined): void
}

/** What the session asks of the carrier stream. */
export interface CarrierLeg {
  sendMedia(payload: string): void
  sendMark(name: string): void
  sendClear(): void
  close(code: number, reason: string): void
  /** Forward the leg's events to `events` from now on. */
  bind(events: CallerEvents): void
  /** The agent paused (true) or resumed (false) the call's recording; present on a recorded call's leg (docs/recording.md). */
  pauseRecording?(paused: boolean): void
  /** Whether the call's recording is paused now (a moved call's next stream starts paused then). */
  recordingPaused?(): boolean
}

/**
 * An agent's checkpoint (docs/calls.md, "Checkpoints"): a JSON object, at most
 * MAX_CHECKPOINT_BYTES serialized, kept with the session and handed to the next agent in `resume`.
 */
export type Checkpoint = { readonly [key: string]: unknown }

/** The most UTF-8 bytes a checkpoint may take serialized (`JSON.stringify`): 16 KiB. */
export const MAX_CHECKPOINT_BYTES = 16 * 1024

/** What the agent side tells the session. */
export interface AgentEvents {
  agentMedia(payload: string): void
  agentMark(name: string): void
  agentClear(): void
  agentHangup(): void
  /**
   * The agent closed its socket with 1000 (normal) during the call: an ending, not a failure
   * (docs/calls.md, "A clean close is an ending").
   */
  agentClosed(): void
  agentTransfer(to: string): void
  /** `{"event":"recording","recording":{"paused":...}}`: pause or resume the call's recording (docs/recording.md). */
  agentRecording?(paused: boolean): void
  /** `{"event":"checkpoint","checkpoint":{...}}`, already checked (an object within MAX_CHECKPOINT_BYTES): the latest is kept with the session. */
  agentCheckpoint?(checkpoint: Checkpoint): void
  /** The agent failed: `error` event, protocol violation, socket dropped, stopped reading. */
  agentFailed(fault: LegFault): void
}

/** Who answered an outbound call, by the carrier's machine detection (docs/calls.md, "Answering-machine detection"). */
export type AnsweredBy = "human" | "machine" | "fax" | "unknown"

/** The carrier's verdict: callgate's word for it, and the carrier's own (Twilio AnsweredBy, Telnyx result). */
export interface MachineVerdict {
  readonly answeredBy: AnsweredBy
  readonly detail: string
}

/** What callgate tells the agent at the start of a call (the `start` customParameters). */
export interface AgentStart {
  readonly sessionId: string
  readonly agentId: string
  readonly environmentId: string
  readonly from: string
  readonly to: string
  readonly direction: "inbound" | "outbound"
  readonly provider: Provider
  readonly streamSid: string
  /** W3C trace context of the session span, for the agent to start its own spans from. */
  readonly traceparent?: string | undefined
  /** The placer's metadata of an outbound call, added to the `start` customParameters. */
  readonly metadata?: Readonly<Record<string, string>> | undefined
  /** The entry URL's extra query parameters, added to the `start` customParameters. */
  readonly customParameters?: Readonly<Record<string, string>> | undefined
  /** The machine-detection verdict, when it came before the agent's `start`. */
  readonly answeredBy?: AnsweredBy | undefined
  /** The carrier stream's audio format, which the agent receives and sends (`start.mediaFormat`); 8 kHz mu-law when absent. */
  readonly mediaFormat?: AudioFormat | undefined
  /**
   * The call's failover this agent takes it over at (1, 2, ...): `customParameters` then carry
   * `resumed: "true"` and `failover: "<n>"` (docs/calls.md, "When an agent takes over a call").
   */
  readonly failover?: number | undefined
  /**
   * The caller came back from an agent's transfer that was not answered (docs/calls.md, "When a
   * transfer fails"): `customParameters` carry `resumed: "true"` (and no `failover`).
   */
  readonly returned?: boolean | undefined
}

/**
 * The `resume` extension a new agent of a call receives right after `start` (docs/calls.md, "When
 * an agent takes over a call"): the session's latest checkpoint (null when none), its turns so far,
 * why the previous agent leg ended, and how much caller audio was held for it.
 */
export interface AgentResume {
  readonly checkpoint: unknown
  readonly turns: ReadonlyArray<object>
  readonly previousEndReason: string
  readonly heldAudioMs: number
  /** The agent's transfer that was not answered (previousEndReason `transfer_failed`): its number and outcome. */
  readonly transfer?: FailedTransfer | undefined
}

/** An agent's transfer the caller came back from: the number dialled and its outcome (busy, no-answer, failed). */
export interface FailedTransfer {
  readonly to: string
  readonly status: string
}

/** What the session asks of the agent connection. */
export interface AgentLink {
  /** Sends `connected` and `start`, then routes the agent's messages to `events`. */
  begin(start: AgentStart, events: AgentEvents): void
  sendMedia(payload: string, timestampMs: number): void
  sendDtmf(digit: string): void
  sendMark(name: string): void
  /** Sends `{"event":"amd"}`: the machine-detection verdict came after `start`. */
  sendAmd(verdict: MachineVerdict): void
  /** Sends `{"event":"resume"}` (right after `start`, to an agent taking over a call). */
  sendResume(resume: AgentResume): void
  /** Sends `stop` and closes the socket; idempotent. */
  finish(code: number, reason: string): void
  /** Bytes queued towards the agent. */
  readonly backlog: number
}

/** A media stream that presented valid credentials: enough to open a session. */
export interface StreamOpening {
  /** An inbound call's session id, minted by the entry webhook and named in its `<Redirect>` (docs/reliability.md). */
  readonly entrySessionId?: string | undefined
  readonly agentId: string
  readonly environmentId: string
  readonly kind: CallKind
  readonly callId: string
  readonly accountSid?: string | undefined
  readonly from?: string | undefined
  readonly to?: string | undefined
  readonly direction?: "inbound" | "outbound" | undefined
  /** The stream's audio format (Telnyx `start.media_format`); 8 kHz mu-law when absent. */
  readonly mediaFormat?: AudioFormat | undefined
  /** The entry URL's extra query parameters (EntryWire.entryCustomParameters), carried by the session token. */
  readonly customParameters?: Readonly<Record<string, string>> | undefined
  /** The carrier's id of this media stream (Twilio streamSid, Telnyx stream_id). */
  readonly streamSid: string
  /** Set for an outbound call callgate placed: the session waiting for this stream. */
  readonly sessionId?: string | undefined
  /** See SessionInfo.reservedAgent. */
  readonly reservedAgent?: string | null | undefined
  /** The session moved here from another instance in an agent failover (see SessionInfo.resumed). */
  readonly resumed?: ResumedSession | undefined
  /** The environment's `recording` as the call's admission read it (SessionInfo.recording). */
  readonly recording?: "on" | "off" | undefined
  /** A Call Control stream's own id in callgate's terms (see SessionInfo.streamRef). */
  readonly streamRef?: string | undefined
  readonly carrier: CarrierLeg
}

/** What an instance hands the next one when it moves a live call there (the session token carries it). */
export interface ResumedSession {
  /** The failover this move is (1, 2, ...). */
  readonly failover: number
  /** Why the previous agent leg ended. */
  readonly previousEndReason: string
  /** When the previous agent leg ended, epoch ms (for the failover gap metric). */
  readonly lostAt: number
  /** The session's createdAt, epoch ms. */
  readonly createdAt: number
  /**
   * Not a failover: the caller came back from the agent's transfer that was not answered
   * (previousEndReason `transfer_failed`; `failover` is then the session's count so far).
   */
  readonly transfer?: FailedTransfer | undefined
  /** The agent had the call's recording paused when the call moved: the next stream's part starts paused (docs/recording.md). */
  readonly recordingPaused?: boolean | undefined
}
