import { Cause, Deferred, Effect, Exit, Fiber, FiberId } from "effect"
import type { AgentConnector } from "../agent/AgentConnector.js"
import type { Breaker } from "../breaker/Breaker.js"
import type { BreakerTrip } from "../breaker/BreakerStore.js"
import { describeNoResponseTrip } from "../breaker/ResponseWatchdog.js"
import { MAX_MEDIA_BYTES } from "../frames/MediaFields.js"
import { isPlayoutMark } from "../turns/PlayoutMarks.js"
import { nullTurnObserver, type TurnObserver } from "../turns/TurnObserver.js"
import { MULAW_8K, payloadTranscoders, toObservedMulaw } from "../kernel/AudioFormat.js"

const samePayload = (payload: string) => payload
import type { AgentEvents, AgentLink, AgentStart, CallerEvents, CarrierLeg, Checkpoint, LegFault, MachineVerdict } from "../kernel/CallLegs.js"
import { HardError } from "../kernel/HardError.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"
import { CloseCode } from "../frames/WireSocket.js"
import { traceparentOf, withSessionSpan } from "../observability/Tracing.js"
import type { Session } from "../sessions/SessionSchema.js"
import { type CallCheckpoints, type CheckpointKeeper, noCheckpoints } from "./CallCheckpoints.js"
import type { CallSettlement } from "./CallSettlement.js"
import { type CallTurns, type TurnWatch, unwatched } from "./CallTurns.js"
import { SessionEnding } from "./SessionEnding.js"

export { SessionEnding } from "./SessionEnding.js"



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

/** The app's services a live call works with; LiveCalls builds this once and hands it to every call. */
export interface LiveCallParts {
  readonly settlement: CallSettlement
  readonly turns: CallTurns
  readonly checkpoints: CallCheckpoints
  readonly breaker: Breaker
  readonly connector: AgentConnector
  /** A new stream id for the agent's `start`. */
  readonly newStreamSid: () => string
}

/** The hard error of a call cut because callgate is shutting down. */
export const shutdownError = () => new HardError({ kind: "shutdown", message: "callgate shut down during the call." })

/**
 * The one owner of a live call (docs/design.md, "The live call"): its carrier leg, its agent leg,
 * its turn watch, its subscription to the breaker's trips, its scope and its single ending.
 *
 * - The relay: carrier frames to the agent and agent frames to the carrier, unchanged and in
 *   order, with the turn observer told about each. That part is synchronous and runs per frame:
 *   no Effect, no Promise, and per frame no allocation beyond the outgoing string (the base64
 *   payload is pasted into it; the bytes the observer sees are decoded into one buffer shared by
 *   every call).
 * - `end` is the one way the call ends, whatever ends it (carrier stop or hang-up, the agent's
 *   hangup, close, transfer or failure, a breaker trip heard through the call's own subscription,
 *   the maximum duration, an API hang-up, the drain at shutdown): the first ending stands.
 * - `run` is the call's one fiber (started by LiveCalls, in the call's scope): it records the
 *   call, watches its turns, holds the trip subscription and connects the agent, then waits for
 *   the ending and acts on it (`CallSettlement.settle`: hang-up, transfer, or the rescue). Every
 *   fiber the call starts lives in that scope, which closes when the call is settled or cut.
 */
export class LiveCall implements CallerEvents, AgentEvents {
  private observer: TurnObserver = nullTurnObserver
  private watch: TurnWatch = unwatched
  /** The agents' checkpoints (docs/calls.md, "Checkpoints"): `latest` is what a `resume` hands the next agent. */
  checkpoints: CheckpointKeeper = noCheckpoints
  private readonly endSignal = Deferred.unsafeMake<SessionEnding>(FiberId.none)
  private agent: AgentLink | undefined
  private held: Array<Held> | undefined = []
  private ending: SessionEnding | undefined
  private view: Uint8Array = sharedAudio.subarray(0, 0)
  private readonly startedAtMs = performance.now()
  /** Caller frames dropped because the agent took too long to connect. */
  droppedFrames = 0
  /** The observer threw: it was replaced by the null observer; reported when the session ends. */
  observerFailure: unknown = undefined

  /** The outbound call's machine-detection verdict, once the carrier gave it. */
  answeredBy: MachineVerdict | undefined
  /** The call's audio as the turn observer reads it (8 kHz mu-law), chosen once per call. */
  private readonly toObserved: (bytes: Uint8Array) => Uint8Array

  constructor(
    readonly info: SessionInfo,
    readonly carrier: CarrierLeg,
    private readonly limits: RelayLimits = DEFAULT_RELAY_LIMITS
  ) {
    this.answeredBy = info.answeredBy
    this.toObserved = toObservedMulaw(info.mediaFormat ?? MULAW_8K)
  }

  /** Payloads from the carrier's format to the agent's and back: unchanged unless agentAudioFormat asks for mu-law. */
  private toAgent: (payload: string) => string = samePayload
  private toCarrier: (payload: string) => string = samePayload

  /**
   * The carrier's machine-detection verdict: in the agent's `start` when the agent is not connected
   * yet, else an `amd` message. The first verdict stands.
   */
  machineVerdict(verdict: MachineVerdict): void {
    if (this.answeredBy !== undefined || this.ending !== undefined) return
    this.answeredBy = verdict
    this.agent?.sendAmd(verdict)
  }

  /**
   * The call's life, on its one fiber (LiveCalls runs it): the agent is sought and the record
   * written while the call relays; once the ending stands it is acted on, and the closed record
   * is the result. Interrupted (the shutdown grace ran out): both sockets are closed at least.
   */
  run(parts: LiveCallParts): Effect.Effect<Session> {
    const call = this
    const { info } = this
    return Effect.gen(function* () {
      // The caller is on the line: the agent is sought first, the record is written beside it
      // (child fibers of the call's fiber: they end with it at the latest). The agent leg is a
      // span of its own, open until the call's scope closes.
      const session = yield* Effect.currentSpan.pipe(Effect.orDie)
      const leg = yield* Effect.makeSpanScoped("callgate.agent.leg", { attributes: { "callgate.session.id": info.sessionId } })
      call.checkpoints = yield* parts.checkpoints.keeper(info)
      const connecting = yield* Effect.fork(call.connectAgent(parts, traceparentOf(session)).pipe(Effect.withParentSpan(leg)))
      const recording = yield* Effect.fork(parts.settlement.begin(info))
      call.observeWith(yield* parts.turns.watch(info))
      // The breaker's trips (this call's, another call's, another instance's) reach the call here.
      yield* parts.breaker.subscribeTrips(info.agentId, info.environmentId, (trip) => call.tripHeard(trip))
      const ending = yield* Deferred.await(call.endSignal)
      yield* Fiber.interrupt(connecting)
      // The end is recorded over the start, so the start must be written first.
      yield* Fiber.join(recording)
      return yield* parts.settlement.settle(call, ending).pipe(Effect.uninterruptible)
    }).pipe(
      // The call's scope: its turn watch, its trip subscription, its store writes end with it.
      Effect.scoped,
      Effect.onInterrupt(() =>
        Effect.sync(() => {
          call.end(SessionEnding.Failed({ error: shutdownError() }))
          call.release(CloseCode.goingAway, "callgate is shutting down")
          call.carrier.close(CloseCode.goingAway, "callgate is shutting down")
        })
      ),
      Effect.annotateLogs({ sessionId: info.sessionId, agentId: info.agentId, environmentId: info.environmentId }),
      withSessionSpan(info.sessionId, {
        "callgate.session.id": info.sessionId,
        "callgate.agent.id": info.agentId,
        "callgate.environment.id": info.environmentId,
        "callgate.provider": info.provider,
        "callgate.direction": info.direction,
        "callgate.call.id": info.call.callId
      })
    )
  }

  /**
   * Ends the call unless it already ended; returns the ending that stands. Idempotent, and the
   * only way a call ends: `run` then acts on it (docs/design.md, "The path of a rescue").
   */
  end(ending: SessionEnding): SessionEnding {
    if (this.ending !== undefined) return this.ending
    this.ending = ending
    Deferred.unsafeDone(this.endSignal, Exit.succeed(ending))
    return ending
  }

  /** The turns seen so far (stored on the session when it ends). */
  turns() {
    return this.watch.turns()
  }

  /** A trip of the call's environment: the call is rescued when its agent is silent past its first deadline. */
  private tripHeard(trip: BreakerTrip): void {
    if (this.ending !== undefined) return
    const rescue = this.watch.rescuedBy(trip)
    if (rescue === undefined) return
    this.end(SessionEnding.Failed({ error: new HardError({ kind: "agent_unresponsive", message: describeNoResponseTrip(rescue) }) }))
  }

  /** Finds the agent and connects it, unless the call ends first; a failure ends the call. */
  private connectAgent(parts: LiveCallParts, traceparent: string): Effect.Effect<void> {
    const call = this
    const { info } = this
    return Effect.gen(function* () {
      const target = yield* parts.settlement.agentTarget(info)
      yield* Effect.annotateCurrentSpan("callgate.agent.mode", target.agentUrl === null ? "dial_in" : "dial_out")
      const agent = yield* parts.connector.acquire(target)
      yield* Effect.annotateCurrentSpan("callgate.agent.outcome", "connected")
      call.attachAgent(agent, {
        sessionId: info.sessionId,
        agentId: info.agentId,
        environmentId: info.environmentId,
        from: info.from ?? "",
        to: info.to ?? "",
        direction: info.direction,
        provider: info.provider,
        streamSid: parts.newStreamSid(),
        traceparent,
        metadata: info.metadata,
        customParameters: info.customParameters,
        // What the agent hears and speaks: the carrier's format, or mu-law when the environment asks (transcoded by the relay).
        mediaFormat: target.agentSpeaksMulaw === true ? MULAW_8K : info.mediaFormat
      })
    }).pipe(
      Effect.catchAll((error) =>
        Effect.zipRight(
          Effect.annotateCurrentSpan("callgate.agent.outcome", error.kind),
          Effect.sync(() => call.end(SessionEnding.Failed({ error })))
        )
      ),
      // A bug must not leave the caller waiting for an agent until the maximum duration.
      Effect.catchAllDefect((defect) =>
        Effect.zipRight(
          Effect.logError("connecting the agent failed", Cause.die(defect)),
          Effect.sync(() =>
            call.end(SessionEnding.Failed({ error: new HardError({ kind: "internal", message: "callgate failed to connect the agent." }) }))
          )
        )
      )
    )
  }

  /** Installs the call's turn watch (frames before this went to the null observer). */
  observeWith(watch: TurnWatch): void {
    this.watch = watch
    if (this.ending === undefined) this.observer = watch.observer
    else this.closeObserverWith(watch.observer)
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

  agentCheckpoint(checkpoint: Checkpoint): void {
    if (this.ending === undefined) this.checkpoints.keep(checkpoint)
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
