import { Data } from "effect"
import { MAX_MEDIA_BYTES } from "../frames/MediaFields.js"
import { isPlayoutMark } from "../turns/PlayoutMarks.js"
import { nullTurnObserver, type TurnObserver } from "../turns/TurnObserver.js"
import { MULAW_8K, payloadTranscoders, toObservedMulaw } from "../kernel/AudioFormat.js"

const samePayload = (payload: string) => payload
import type { AgentEvents, AgentLink, AgentStart, CallerEvents, CarrierLeg, LegFault, MachineVerdict } from "../kernel/CallLegs.js"
import { HardError } from "../kernel/HardError.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"

/** How a session ends; decided once, by whichever comes first. */
export type SessionEnding = Data.TaggedEnum<{
  /**
   * The caller hung up (carrier stop, stream closed, CallHungUp), the agent hung up (`hangup`
   * event or the Twilio-compatible REST API), the agent closed its socket cleanly (1000), or an
   * operator hung up through `DELETE .../calls/{sessionId}` (api_hangup).
   */
  Completed: { readonly reason: "caller_hangup" | "agent_hangup" | "agent_closed" | "api_hangup" }
  /** The agent asked to move the call to `to`. */
  Transfer: { readonly to: string }
  /**
   * The agent handed the call a TwiML document through the Twilio-compatible REST API; `reason`
   * is agent_transfer when it dials, agent_hangup when it only hangs up, agent_twiml otherwise.
   */
  Twiml: { readonly twiml: string; readonly reason: "agent_transfer" | "agent_hangup" | "agent_twiml" }
  /** SESSION_MAX_DURATION elapsed. */
  Timeout: {}
  /** A hard error: the rescue runs. */
  Failed: { readonly error: HardError }
  /**
   * Another instance claimed the session (this one had paused, or lost the store, for longer than
   * the fleet waits): both legs are closed, with no carrier request, no rescue and no ending of
   * this instance's own (docs/reliability.md, "Fencing").
   */
  TakenOver: {}
}>
export const SessionEnding = Data.taggedEnum<SessionEnding>()

export interface RelayLimits {
  /** Caller frames held while the agent is being connected (beyond: dropped, counted). */
  readonly maxHeldFrames: number
  /** Bytes queued towards an agent that stops reading before the call is failed. */
  readonly maxAgentBacklogBytes: number
}

export const DEFAULT_RELAY_LIMITS: RelayLimits = { maxHeldFrames: 1500, maxAgentBacklogBytes: 4 * 1024 * 1024 }

interface Held {
  readonly dtmf: boolean
  readonly value: string
  readonly atMs: number
}

const faultError = (fault: LegFault) => new HardError({ kind: fault.kind, message: fault.message })

/**
 * The one buffer every call decodes its audio into for the turn observer. Decoding and observing
 * are synchronous and observers copy what they keep (see TurnObserver), so no two calls ever use
 * it at once; one per process instead of 45 KB per call.
 */
const sharedAudio = Buffer.allocUnsafeSlow(MAX_MEDIA_BYTES)

/**
 * The relay of one call: carrier frames to the agent and agent frames to the carrier, unchanged
 * and in order, with the turn observer told about each. Everything here is synchronous and runs
 * per frame: no Effect, no Promise, and per frame no allocation beyond the outgoing string (the
 * base64 payload is pasted into it; the bytes the observer sees are decoded into one buffer
 * shared by every call). The session ends exactly once: `end` keeps the first ending and reports it to the
 * session fiber, which does the slow part (REST calls, store, webhook).
 */
export class CallSession implements CallerEvents, AgentEvents {
  private observer: TurnObserver = nullTurnObserver
  private agent: AgentLink | undefined
  private held: Array<Held> | undefined = []
  private ending: SessionEnding | undefined
  private view: Uint8Array = sharedAudio.subarray(0, 0)
  private readonly startedAtMs = performance.now()
  /** The outbound call's machine-detection verdict, once the carrier gave it. */
  answeredBy: MachineVerdict | undefined
  /** Caller frames dropped because the agent took too long to connect. */
  droppedFrames = 0
  /** The observer threw: it was replaced by the null observer; reported when the session ends. */
  observerFailure: unknown = undefined

  constructor(
    readonly info: SessionInfo,
    readonly carrier: CarrierLeg,
    private readonly onEnd: (ending: SessionEnding) => void,
    private readonly limits: RelayLimits = DEFAULT_RELAY_LIMITS
  ) {
    this.answeredBy = info.answeredBy
    this.toObserved = toObservedMulaw(info.mediaFormat ?? MULAW_8K)
  }

  /** Payloads from the carrier's format to the agent's and back: unchanged unless agentAudioFormat asks for mu-law. */
  private toAgent: (payload: string) => string = samePayload
  private toCarrier: (payload: string) => string = samePayload
  /** The call's audio as the turn observer reads it (8 kHz mu-law), chosen once per call. */
  private readonly toObserved: (bytes: Uint8Array) => Uint8Array

  /**
   * The carrier's machine-detection verdict: in the agent's `start` when the agent is not connected
   * yet, else an `amd` message. The first verdict stands.
   */
  machineVerdict(verdict: MachineVerdict): void {
    if (this.answeredBy !== undefined || this.ending !== undefined) return
    this.answeredBy = verdict
    this.agent?.sendAmd(verdict)
  }

  /** Installs the session's turn observer (frames before this went to the null observer). */
  observeWith(observer: TurnObserver): void {
    if (this.ending === undefined) this.observer = observer
    else this.closeObserverWith(observer)
  }

  /** Connects the agent: sends `connected` and `start`, then the caller frames held so far. */
  attachAgent(agent: AgentLink, start: AgentStart): void {
    if (this.ending !== undefined) return agent.finish(1000, "the call ended before the agent was connected")
    this.agent = agent
    // The agent's audio format differs from the carrier's (agentAudioFormat): transcode both ways, chosen once.
    const transcoders = payloadTranscoders(this.info.mediaFormat ?? MULAW_8K, start.mediaFormat ?? MULAW_8K)
    if (transcoders !== undefined) {
      this.toAgent = transcoders.toAgent
      this.toCarrier = transcoders.toCarrier
    }
    agent.begin(this.answeredBy !== undefined ? { ...start, answeredBy: this.answeredBy.answeredBy } : start, this)
    const held = this.held
    this.held = undefined
    if (held === undefined || this.ending !== undefined) return
    for (const frame of held) {
      if (frame.dtmf) agent.sendDtmf(frame.value)
      else agent.sendMedia(this.toAgent(frame.value), Math.round(frame.atMs - this.startedAtMs))
    }
  }

  /** Ends the session unless it already ended; returns the ending that stands. Idempotent. */
  end(ending: SessionEnding): SessionEnding {
    if (this.ending !== undefined) return this.ending
    this.ending = ending
    this.onEnd(ending)
    return ending
  }

  get ended(): SessionEnding | undefined {
    return this.ending
  }

  /** The session is over: stop the observer, send the agent `stop` and close its socket. */
  release(code: number, reason: string): void {
    const observer = this.observer
    this.observer = nullTurnObserver
    this.closeObserverWith(observer)
    this.agent?.finish(code, reason)
  }

  // Carrier side

  callerMedia(payload: string): void {
    if (this.ending !== undefined) return
    const atMs = performance.now()
    if (this.observer !== nullTurnObserver) {
      try {
        this.observer.callerAudio(this.decode(payload), atMs)
      } catch (error) {
        this.observerFailed(error)
      }
    }
    const agent = this.agent
    if (agent === undefined) return this.hold(false, payload, atMs)
    // A caller frame can end a turn the agent is already answering: callgate's playout mark.
    this.sendPlayoutMark()
    agent.sendMedia(this.toAgent(payload), Math.round(atMs - this.startedAtMs))
    if (agent.backlog > this.limits.maxAgentBacklogBytes) {
      this.end(
        SessionEnding.Failed({
          error: new HardError({ kind: "agent_backpressure", message: "The agent stopped reading its connection: audio backed up." })
        })
      )
    }
  }

  callerDtmf(digit: string): void {
    if (this.ending !== undefined) return
    const atMs = performance.now()
    try {
      this.observer.callerDtmf(digit, atMs)
    } catch (error) {
      this.observerFailed(error)
    }
    if (this.agent === undefined) return this.hold(true, digit, atMs)
    this.agent.sendDtmf(digit)
  }

  carrierMark(name: string): void {
    if (this.ending !== undefined) return
    // callgate's own playout marks are never the agent's business.
    if (isPlayoutMark(name)) return this.observer.playoutMarkEchoed(name, performance.now())
    this.agent?.sendMark(name)
  }

  carrierStopped(): void {
    this.end(SessionEnding.Completed({ reason: "caller_hangup" }))
  }

  carrierGone(fault: LegFault | undefined): void {
    this.end(fault === undefined ? SessionEnding.Completed({ reason: "caller_hangup" }) : SessionEnding.Failed({ error: faultError(fault) }))
  }

  // Agent side

  agentMedia(agentPayload: string): void {
    if (this.ending !== undefined) return
    const payload = this.toCarrier(agentPayload)
    if (this.observer !== nullTurnObserver) {
      try {
        this.observer.agentAudio(this.decode(payload), performance.now())
      } catch (error) {
        this.observerFailed(error)
      }
    }
    this.carrier.sendMedia(payload)
    this.sendPlayoutMark()
  }

  agentMark(name: string): void {
    if (this.ending === undefined) this.carrier.sendMark(name)
  }

  agentClear(): void {
    if (this.ending !== undefined) return
    this.observer.agentClear(performance.now())
    this.carrier.sendClear()
  }

  agentHangup(): void {
    this.end(SessionEnding.Completed({ reason: "agent_hangup" }))
  }

  agentClosed(): void {
    this.end(SessionEnding.Completed({ reason: "agent_closed" }))
  }

  agentTransfer(to: string): void {
    this.end(SessionEnding.Transfer({ to }))
  }

  agentRecording(paused: boolean): void {
    if (this.ending === undefined) this.carrier.pauseRecording?.(paused)
  }

  agentFailed(fault: LegFault): void {
    this.end(SessionEnding.Failed({ error: faultError(fault) }))
  }

  // Internals

  /** The mark callgate places after the first voiced frame of an answer (docs/observability.md), when one is due. */
  private sendPlayoutMark(): void {
    const mark = this.observer.takeMark()
    if (mark !== undefined) this.carrier.sendMark(mark)
  }

  /** Base64 to bytes in the shared buffer; the view is re-made only when the frame size changes. */
  private decode(payload: string): Uint8Array {
    const length = sharedAudio.write(payload, 0, "base64")
    if (length !== this.view.length) this.view = sharedAudio.subarray(0, length)
    return this.toObserved(this.view)
  }

  private hold(dtmf: boolean, value: string, atMs: number) {
    const held = this.held
    if (held === undefined) return
    if (held.length >= this.limits.maxHeldFrames) {
      this.droppedFrames++
      return
    }
    held.push({ dtmf, value, atMs })
  }

  /** An observer that threw is closed (so it can release its timers) and replaced by the null one. */
  private observerFailed(error: unknown) {
    this.observerFailure ??= error
    const failed = this.observer
    this.observer = nullTurnObserver
    this.closeObserverWith(failed)
  }

  private closeObserverWith(observer: TurnObserver) {
    try {
      observer.close()
    } catch (error) {
      this.observerFailure ??= error
    }
  }
}
