import { Cause, Context, Deferred, Duration, Effect, Exit, Fiber, FiberId, FiberRef, HashMap, Scope, Tracer } from "effect"
import type { AgentConnector, AgentTarget } from "../agent/AgentConnector.js"
import type { Breaker } from "../breaker/Breaker.js"
import type { BreakerTrip } from "../breaker/BreakerStore.js"
import { describeNoResponseTrip } from "../breaker/ResponseWatchdog.js"
import { mediaBytes } from "../frames/MediaBytes.js"
import { isPlayoutMark } from "../turns/PlayoutMarks.js"
import { nullTurnObserver, type TurnObserver } from "../turns/TurnObserver.js"
import { type AudioFormat, bytesPerMs, comfortNoiseFrames, MULAW_8K, payloadTranscoders, toObservedMulaw } from "../kernel/AudioFormat.js"
import { isoAt, frameTimeToEpochMs } from "../kernel/Time.js"

const samePayload = (payload: string) => payload
import type { AgentEvents, AgentLink, AgentResume, AgentStart, CallerEvents, CarrierLeg, Checkpoint, LegFault, MachineVerdict } from "../kernel/CallLegs.js"
import { HardError } from "../kernel/HardError.js"
import { type CallFork, makeCallFork, whileRunning } from "../kernel/SessionFibers.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"
import { CloseCode } from "../frames/WireSocket.js"
import { endSpan, makeSessionSpan, traceparentOf } from "../observability/Tracing.js"
import type { AgentLeg, Session } from "../sessions/SessionSchema.js"
import { type CallCheckpoints, type CheckpointKeeper, noCheckpoints } from "./CallCheckpoints.js"
import type { CallSettlement } from "./CallSettlement.js"
import { type CallTurns, type TurnWatch, unwatched } from "./CallTurns.js"
import type { CallMoverShape } from "./CallMover.js"
import type { FailoverMetrics } from "./FailoverMetrics.js"
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

/** The app's services a live call works with; LiveCalls builds this once and hands it to every call. */
export interface LiveCallParts {
  readonly settlement: CallSettlement
  readonly turns: CallTurns
  readonly checkpoints: CallCheckpoints
  readonly breaker: Breaker
  readonly connector: AgentConnector
  /** A new stream id for the agent's `start`. */
  readonly newStreamSid: () => string
  readonly failovers: FailoverMetrics
  /** AGENT_FAILOVER_MAX_PER_SESSION. */
  readonly maxFailovers: number
  /** This instance's INSTANCE_ID, for the session's agent legs. */
  readonly instanceId: string
  /** Moves a call to another instance whose agent is idle (docs/design.md, "The path of a failover"). */
  readonly mover: Pick<CallMoverShape, "move">
}

/** A leg still holding the call: its end is written when it ends. */
type OpenLeg = { startedAt: string; endedAt: string | null; endReason: string | null; readonly instanceId: string }

/** The frame cadence of comfort noise while no agent holds the call. */
const COMFORT_NOISE_FRAME_MS = 20

/** Decoded bytes of a base64 payload (without decoding it). */
const base64Bytes = (payload: string) => {
  const padding = payload.endsWith("==") ? 2 : payload.endsWith("=") ? 1 : 0
  return (payload.length * 3) / 4 - padding
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
  private readonly startedAtMs = performance.now()
  /** Caller audio bytes in `held` (for the resume's heldAudioMs). */
  private heldBytes = 0
  /** The agent's marks not yet echoed by the carrier; at a failover they become `staleMarks`, whose echoes nobody hears. */
  private pendingMarks = new Set<string>()
  private staleMarks: Set<string> | undefined
  /** What the first agent was given (its target and `start`): a failover gives the next agent the same. */
  private target: AgentTarget | undefined
  private firstStart: AgentStart | undefined
  /** The environment's agentFailoverTimeout, read with the agent's target when the call began. */
  private failoverTimeoutSeconds = 0
  /** The agent legs so far, oldest first; the last one holds the call unless a failover is under way. */
  private readonly legs: Array<OpenLeg> = []
  /** The call's fork (set once `run` started): the failover runs there. */
  private forkInCall: CallFork | undefined
  private parts: LiveCallParts | undefined
  private seeking: Fiber.RuntimeFiber<void> | undefined
  /** Set while the carrier is asked to move the stream to another instance: the old stream's end is not the call's. */
  private moving = false
  /** How the carrier stream ended while the move was asked (the call's ending if the move fails). */
  private stoppedWhileMoving: SessionEnding | undefined
  /** The turns of the session before it came to this instance (a resumed session: from the store). */
  private priorTurns: ReadonlyArray<ReturnType<TurnWatch["turns"]>[number]> = []
  /** Agent failovers of this call so far. */
  failoverCount = 0
  /** Caller frames dropped because the agent took too long to connect. */
  droppedFrames = 0
  /** The observer threw: it was replaced by the null observer; reported when the session ends. */
  observerFailure: unknown = undefined

  /** The outbound call's machine-detection verdict, once the carrier gave it. */
  answeredBy: MachineVerdict | undefined
  /**
   * The call's audio as the turn observer reads it (8 kHz mu-law), chosen once per call and
   * direction (a G.722 call has a decoder in each). They read the frame's bytes from mediaBytes,
   * the buffer every call shares (decoding and observing are synchronous and observers copy what
   * they keep, see TurnObserver), decoded once for the observer and the recorder.
   */
  private readonly callerToObserved: (bytes: Uint8Array) => Uint8Array
  private readonly agentToObserved: (bytes: Uint8Array) => Uint8Array

  constructor(
    readonly info: SessionInfo,
    readonly carrier: CarrierLeg,
    private readonly limits: RelayLimits = DEFAULT_RELAY_LIMITS
  ) {
    this.answeredBy = info.answeredBy
    this.callerToObserved = toObservedMulaw(info.mediaFormat ?? MULAW_8K)
    this.agentToObserved = toObservedMulaw(info.mediaFormat ?? MULAW_8K)
  }

  /** Payloads from the carrier's format to the agent's and back: unchanged unless agentAudioFormat asks for mu-law. */
  private toAgent: (payload: string) => string = samePayload
  private toCarrier: (payload: string) => string = samePayload
  /** The agent format the transcoders above were made for: a later agent in the same format keeps them (G.722's state goes on). */
  private transcodedFor: string | undefined
  /** That format, while the call transcodes (comfort noise goes to the carrier through `toCarrier` then). */
  private transcodedFrom: AudioFormat | undefined

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
    const life = Effect.gen(function* () {
      // The caller is on the line: the agent is sought first, the record is written beside it
      // (child fibers of the call's fiber: they end with it at the latest). The agent leg is a
      // span of its own, open until the call's scope closes.
      const session = yield* Effect.currentSpan.pipe(Effect.orDie)
      call.parts = parts
      const fork = yield* makeCallFork
      call.forkInCall = fork
      const leg = yield* Effect.makeSpanScoped("callgate.agent.leg", { attributes: { "callgate.session.id": info.sessionId }, captureStackTrace: false })
      call.checkpoints = yield* parts.checkpoints.keeper(info, fork)
      // The two are held only while they run: a fiber that is over would keep its last refs and
      // context (a copy of the app's services) for as long as the call lasts.
      let connecting: Fiber.RuntimeFiber<void> | undefined = whileRunning(
        fork(call.connectAgent(parts, traceparentOf(session)).pipe(Effect.withParentSpan(leg), Effect.ensuring(Effect.sync((): void => void (connecting = undefined)))))
      )
      // A session resumed here from another instance is adopted (its record moves here) before its agent starts.
      let recording: Fiber.RuntimeFiber<void> | undefined =
        info.resumed === undefined ? whileRunning(fork(parts.settlement.begin(info).pipe(Effect.ensuring(Effect.sync((): void => void (recording = undefined)))))) : undefined
      call.observeWith(
        yield* parts.turns.watch(info, fork, { onMissedDeadline: (inARow) => call.deadlinesMissed(inARow), recorded: () => call.turns() })
      )
      // The breaker's trips (this call's, another call's, another instance's) reach the call here.
      yield* parts.breaker.subscribeTrips(info.agentId, info.environmentId, (trip) => call.tripHeard(trip))
      const ending = yield* Deferred.await(call.endSignal)
      if (connecting !== undefined) yield* Fiber.interrupt(connecting)
      if (call.seeking !== undefined) yield* Fiber.interrupt(call.seeking)
      // The end is recorded over the start, so the start must be written first.
      if (recording !== undefined) yield* Fiber.join(recording)
      return yield* parts.settlement.settle(call, ending).pipe(Effect.uninterruptible)
    })
    // The call's fiber is its own (LiveCalls forks one per call), so its refs are set once, here,
    // and not restored: the session span as the parent span, the call's scope, the log annotations.
    // Layered (Effect.withSpan, annotateLogs, Effect.scoped), each would keep a copy of the app's
    // context or refs and a stack of frames for as long as the call lasts (docs/design.md, "Per-call state").
    const enter = Effect.gen(function* () {
      const span = yield* makeSessionSpan(info.sessionId, {
        "callgate.session.id": info.sessionId,
        "callgate.agent.id": info.agentId,
        "callgate.environment.id": info.environmentId,
        "callgate.provider": info.provider,
        "callgate.direction": info.direction,
        "callgate.call.id": info.call.callId
      })
      const scope = yield* Scope.make()
      yield* FiberRef.update(FiberRef.currentContext, (context) => Context.add(Context.add(context, Tracer.ParentSpan, span), Scope.Scope, scope))
      yield* FiberRef.update(FiberRef.currentLogAnnotations, (annotations) =>
        HashMap.set(HashMap.set(HashMap.set(annotations, "sessionId", info.sessionId), "agentId", info.agentId), "environmentId", info.environmentId)
      )
      return { span, scope }
    })
    return Effect.acquireUseRelease(
      enter,
      // `life` needs the call's Scope: `enter` put it in this fiber's context.
      () => life as Effect.Effect<Session>,
      ({ scope, span }, exit) =>
        // The call's scope first (its turn watch, its trip subscription, its store writes end with
        // it); interrupted (the shutdown grace ran out): both sockets are closed at least.
        Scope.close(scope, exit).pipe(
          Effect.zipRight(
            Effect.sync(() => {
              if (Exit.isSuccess(exit) || !Cause.isInterruptedOnly(exit.cause)) return
              call.end(SessionEnding.Failed({ error: shutdownError() }))
              call.release(CloseCode.goingAway, "callgate is shutting down")
              call.carrier.close(CloseCode.goingAway, "callgate is shutting down")
            })
          ),
          Effect.zipRight(endSpan(span, exit))
        )
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

  /**
   * The turns seen so far (stored on the session when it ends). A session moved here from another
   * instance: the turns before it came, then this instance's, numbered on from the last of those.
   */
  turns() {
    const turns = this.watch.turns()
    const prior = this.priorTurns
    if (prior.length === 0) return turns
    const offset = prior[prior.length - 1]!.index
    return [...prior, ...turns.map((turn) => ({ ...turn, index: turn.index + offset }))]
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
      const resumed = info.resumed
      // Moved here by a failover on another instance: the session's record, legs and turns so far
      // come with it, and its latest checkpoint; read from the store at once with the agent's target
      // (the instance that moved the call wrote both before it asked the carrier).
      const [target, adopted, checkpoint] = yield* Effect.all(
        [
          parts.settlement.agentTarget(info),
          resumed === undefined ? Effect.succeed(undefined) : parts.settlement.adopt(info),
          resumed === undefined ? Effect.succeed(null) : call.checkpoints.latest
        ],
        { concurrency: "unbounded" }
      )
      call.target = target
      call.failoverTimeoutSeconds = target.failoverTimeoutSeconds ?? 0
      yield* Effect.annotateCurrentSpan("callgate.agent.mode", target.agentUrl === null ? "dial_in" : "dial_out")
      const agent = yield* parts.connector.acquire(target)
      yield* Effect.annotateCurrentSpan("callgate.agent.outcome", "connected")
      let resume: AgentResume | undefined
      if (resumed !== undefined && adopted !== undefined) {
        call.failoverCount = resumed.failover
        call.legs.push(...adopted.agentLegs.map((leg) => ({ ...leg })))
        call.priorTurns = adopted.turns
        resume = {
          checkpoint,
          turns: adopted.turns.map((turn) => ({ ...turn })),
          previousEndReason: resumed.previousEndReason,
          heldAudioMs: Math.round(call.heldBytes / bytesPerMs(info.mediaFormat ?? MULAW_8K)),
          ...(resumed.transfer !== undefined ? { transfer: { ...resumed.transfer } } : {})
        }
      }
      // Back from the agent's transfer that was not answered: resumed, but no failover.
      const backFromTransfer = resumed?.transfer !== undefined
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
        mediaFormat: target.agentSpeaksMulaw === true ? MULAW_8K : info.mediaFormat,
        ...(resumed === undefined ? {} : backFromTransfer ? { returned: true } : { failover: resumed.failover })
      }, resume)
      if (resumed !== undefined && backFromTransfer) {
        yield* Effect.logInfo("the caller came back from the agent's transfer that was not answered: a new agent took the call", {
          transferStatus: resumed.transfer!.status
        })
        yield* parts.settlement.recordLegs(info, call.agentLegs(), call.failoverCount)
      } else if (resumed !== undefined) {
        const gapMs = Math.max(0, frameTimeToEpochMs(performance.now()) - resumed.lostAt)
        parts.failovers.count("reattached")
        parts.failovers.observeGap(gapMs / 1000)
        yield* Effect.logInfo("agent failover: a new agent on this instance took the call moved here", {
          failover: resumed.failover,
          previousEndReason: resumed.previousEndReason,
          gapMs: Math.round(gapMs)
        })
        yield* parts.settlement.recordLegs(info, call.agentLegs(), call.failoverCount)
      }
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

  /**
   * Connects the agent: sends `connected` and `start` (and, to an agent taking over the call,
   * `resume`), then the caller frames held so far, with their original timestamps.
   */
  attachAgent(agent: AgentLink, start: AgentStart, resume?: AgentResume): void {
    if (this.ending !== undefined) return agent.finish(1000, "the call ended before the agent was connected")
    this.agent = agent
    this.firstStart ??= start
    this.legs.push({ startedAt: isoAt(frameTimeToEpochMs(performance.now())), endedAt: null, endReason: null, instanceId: this.parts?.instanceId ?? "" })
    // The agent's audio format differs from the carrier's (agentAudioFormat): transcode both ways, chosen once.
    const agentFormat = start.mediaFormat ?? MULAW_8K
    const agentFormatKey = `${agentFormat.encoding}/${agentFormat.sampleRate}`
    if (agentFormatKey !== this.transcodedFor) {
      const transcoders = payloadTranscoders(this.info.mediaFormat ?? MULAW_8K, agentFormat)
      this.toAgent = transcoders?.toAgent ?? samePayload
      this.toCarrier = transcoders?.toCarrier ?? samePayload
      this.transcodedFor = agentFormatKey
      this.transcodedFrom = transcoders === undefined ? undefined : agentFormat
    }
    agent.begin(this.answeredBy !== undefined ? { ...start, answeredBy: this.answeredBy.answeredBy } : start, this)
    if (resume !== undefined) agent.sendResume(resume)
    const held = this.held
    this.held = undefined
    this.heldBytes = 0
    // A new agent after a failover: turn timing goes on with it (the gap was no one's latency).
    if (resume !== undefined) this.observer.agentBack(performance.now())
    if (held === undefined || this.ending !== undefined || this.agent !== agent) return
    for (const frame of held) {
      if (frame.dtmf) agent.sendDtmf(frame.value)
      else agent.sendMedia(this.toAgent(frame.value), Math.round(frame.atMs - this.startedAtMs))
    }
  }

  get ended(): SessionEnding | undefined {
    return this.ending
  }

  /** The agent legs so far; the open one (if any) ended now by `endReason` when given (at settling: the session's). */
  agentLegs(endReason?: string): Array<AgentLeg> {
    const now = isoAt(frameTimeToEpochMs(performance.now()))
    return this.legs.map((leg) => (leg.endedAt === null && endReason !== undefined ? { ...leg, endedAt: now, endReason } : { ...leg }))
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
        this.observer.callerAudio(this.callerToObserved(mediaBytes(payload)), atMs)
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
      this.agentLost(new HardError({ kind: "agent_backpressure", message: "The agent stopped reading its connection: audio backed up." }))
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
    // The echo of a mark a failed agent placed is nobody's business.
    if (this.staleMarks?.delete(name) === true) return
    this.pendingMarks.delete(name)
    this.agent?.sendMark(name)
  }

  carrierStopped(): void {
    this.carrierEnded(SessionEnding.Completed({ reason: "caller_hangup" }))
  }

  carrierGone(fault: LegFault | undefined): void {
    this.carrierEnded(fault === undefined ? SessionEnding.Completed({ reason: "caller_hangup" }) : SessionEnding.Failed({ error: faultError(fault) }))
  }

  /** The carrier stream ended: the call's end, unless the carrier is being asked to move the stream (then it decides). */
  private carrierEnded(ending: SessionEnding): void {
    if (this.moving) {
      this.stoppedWhileMoving ??= ending
      return
    }
    this.end(ending)
  }

  // Agent side

  agentMedia(agentPayload: string): void {
    if (this.ending !== undefined) return
    const payload = this.toCarrier(agentPayload)
    if (this.observer !== nullTurnObserver) {
      try {
        this.observer.agentAudio(this.agentToObserved(mediaBytes(payload)), performance.now())
      } catch (error) {
        this.observerFailed(error)
      }
    }
    this.carrier.sendMedia(payload)
    this.sendPlayoutMark()
  }

  agentMark(name: string): void {
    if (this.ending !== undefined) return
    this.pendingMarks.add(name)
    this.carrier.sendMark(name)
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
    this.agentLost(faultError(fault))
  }

  // Agent failover (docs/design.md, "The path of a failover")

  /**
   * The agent missed `inARow` response deadlines since its last answer (each one already counted
   * by the breaker). Two in a row while another agent of the environment is idle here: the call
   * moves to that agent.
   */
  deadlinesMissed(inARow: number): void {
    if (inARow < 2 || this.ending !== undefined || this.agent === undefined || this.target === undefined) return
    if (this.target.agentUrl !== null || this.parts?.connector.anotherIdle(this.info.agentId, this.info.environmentId) !== true) return
    this.agentLost(
      new HardError({ kind: "agent_unresponsive", message: `The agent missed ${inARow} response deadlines in a row while another agent was idle.` })
    )
  }

  /**
   * The agent leg ended abnormally. Within the session's failover budget and the environment's
   * agentFailoverTimeout, the call is kept and moved to another agent (`failover`); otherwise it
   * ends with `error`, whose rescue is today's fallback.
   */
  private agentLost(error: HardError): void {
    if (this.ending !== undefined) return
    const lost = this.agent
    const parts = this.parts
    const forkInCall = this.forkInCall
    // No agent yet (connectAgent ends the call itself), or a failover already under way.
    if (lost === undefined) return
    if (parts === undefined || forkInCall === undefined || this.failoverTimeoutSeconds <= 0 || this.failoverCount >= parts.maxFailovers) {
      this.end(SessionEnding.Failed({ error }))
      return
    }
    const lostAtMs = performance.now()
    this.agent = undefined
    this.failoverCount++
    const leg = this.legs[this.legs.length - 1]
    if (leg !== undefined) {
      leg.endedAt = isoAt(frameTimeToEpochMs(lostAtMs))
      leg.endReason = error.kind
    }
    lost.finish(CloseCode.normal, "callgate moved the call to another agent")
    // Caller audio and DTMF are kept from this moment for the next agent.
    this.held = []
    this.heldBytes = 0
    // The old agent's marks and queued audio go: the carrier echoes (and forgets) them at `clear`.
    this.staleMarks = this.pendingMarks
    this.pendingMarks = new Set()
    this.carrier.sendClear()
    this.observer.agentAway(lostAtMs)
    this.seeking = forkInCall(this.failover(parts, error, lostAtMs, this.failoverCount))
  }

  /** Seeks the next agent with comfort noise on the line; attaches it, or ends the call with `error` when none came in time. */
  private failover(parts: LiveCallParts, error: HardError, lostAtMs: number, failover: number): Effect.Effect<void> {
    const call = this
    const { info } = this
    const target = this.target!
    const timeout = Duration.seconds(this.failoverTimeoutSeconds)
    return Effect.gen(function* () {
      const noise = yield* Effect.fork(call.comfortNoise())
      // No idle agent here: one idle on another instance takes the call there (its stream moves).
      if (target.agentUrl === null && !parts.connector.anotherIdle(info.agentId, info.environmentId)) {
        const moved = yield* call.moveAcross(parts, error, lostAtMs, failover)
        if (moved) return
      }
      const found = yield* Effect.either(parts.connector.seek(target, timeout))
      yield* Fiber.interrupt(noise)
      if (found._tag === "Left") {
        parts.failovers.count("fallback")
        yield* Effect.logWarning("agent failover found no agent in time: the error fallback runs", {
          failover,
          previousEndReason: error.kind,
          timeoutSeconds: call.failoverTimeoutSeconds,
          error: found.left.message
        })
        call.end(SessionEnding.Failed({ error }))
        return
      }
      const agent = found.right
      if (call.ending !== undefined) return agent.finish(CloseCode.normal, "the call ended before the agent was connected")
      const resume: AgentResume = {
        checkpoint: yield* call.checkpoints.latest,
        turns: call.turns().map((turn) => ({ ...turn })),
        previousEndReason: error.kind,
        heldAudioMs: Math.round(call.heldBytes / bytesPerMs(info.mediaFormat ?? MULAW_8K))
      }
      const gapMs = performance.now() - lostAtMs
      call.attachAgent(agent, { ...call.firstStart!, streamSid: parts.newStreamSid(), failover }, resume)
      call.seeking = undefined
      parts.failovers.count("reattached")
      parts.failovers.observeGap(gapMs / 1000)
      yield* Effect.logInfo("agent failover: a new agent took the call", {
        failover,
        previousEndReason: error.kind,
        gapMs: Math.round(gapMs),
        heldAudioMs: resume.heldAudioMs
      })
      yield* parts.settlement.recordLegs(info, call.agentLegs(), call.failoverCount)
    }).pipe(
      Effect.catchAllDefect((defect) =>
        Effect.zipRight(
          Effect.logError("the agent failover failed", Cause.die(defect)),
          Effect.sync(() => void call.end(SessionEnding.Failed({ error })))
        )
      )
    )
  }

  /**
   * Asks the carrier, once, to move the call's stream to another instance with an idle agent of
   * the environment (CallMover). The checkpoint being written and the legs so far are written while
   * the agent there is reserved, and are in the store before the carrier is asked, so the instance
   * taking the call reads them. Moved: the call ends here with `Moved` (no
   * carrier request, no session.ended); not moved: the failover goes on here, unless the caller
   * hung up meanwhile.
   */
  private moveAcross(parts: LiveCallParts, error: HardError, lostAtMs: number, failover: number): Effect.Effect<boolean> {
    const call = this
    const { info } = this
    return Effect.gen(function* () {
      call.moving = true
      // Written while the agent elsewhere is reserved; the mover waits for them before it asks the carrier.
      const written = yield* Effect.fork(Effect.zipRight(call.checkpoints.written, parts.settlement.recordLegs(info, call.agentLegs(), call.failoverCount)))
      const moved = yield* parts.mover.move(
        info,
        {
          failover,
          previousEndReason: error.kind,
          lostAt: frameTimeToEpochMs(lostAtMs),
          createdAt: info.createdAt.getTime(),
          ...(call.carrier.recordingPaused?.() === true ? { recordingPaused: true } : {})
        },
        Fiber.join(written)
      )
      yield* Fiber.join(written)
      call.moving = false
      if (moved._tag === "Some") {
        yield* Effect.logInfo("agent failover: the call's stream moves to another instance", { failover, previousEndReason: error.kind, instanceId: moved.value })
        call.end(SessionEnding.Moved({ to: moved.value }))
        return true
      }
      const stopped = call.stoppedWhileMoving
      if (stopped !== undefined) {
        call.end(stopped)
        return true
      }
      return false
    }).pipe(Effect.ensuring(Effect.sync(() => void (call.moving = false))))
  }

  /**
   * Quiet noise to the caller at the real frame cadence while no agent holds the call (no dead air).
   * A call that transcodes the agent's audio sends it through the same transcoder, made in the
   * agent's format: for G.722, whose carrier decodes the stream with one decoder, everything it is
   * sent comes out of the call's one encoder, so the next agent's voice (through that encoder still)
   * is decoded in step; noise encoded apart would leave the carrier's decoder out of step with it.
   */
  private comfortNoise(): Effect.Effect<void> {
    const call = this
    const transcoded = this.transcodedFrom
    const frames = comfortNoiseFrames(transcoded ?? this.info.mediaFormat ?? MULAW_8K)
    return Effect.gen(function* () {
      const clock = yield* Effect.clock
      const startedAt = clock.unsafeCurrentTimeMillis()
      for (let sent = 0; call.ending === undefined && call.agent === undefined; sent++) {
        const frame = frames[sent % frames.length]!
        call.carrier.sendMedia(transcoded === undefined ? frame : call.toCarrier(frame))
        // Due times from the start, so a late wake-up does not slow the cadence down.
        const wait = startedAt + (sent + 1) * COMFORT_NOISE_FRAME_MS - clock.unsafeCurrentTimeMillis()
        if (wait > 0) yield* Effect.sleep(wait)
      }
    })
  }

  // Internals

  /** The mark callgate places after the first voiced frame of an answer (docs/observability.md), when one is due. */
  private sendPlayoutMark(): void {
    const mark = this.observer.takeMark()
    if (mark !== undefined) this.carrier.sendMark(mark)
  }

  private hold(dtmf: boolean, value: string, atMs: number) {
    const held = this.held
    if (held === undefined) return
    if (held.length >= this.limits.maxHeldFrames) {
      this.droppedFrames++
      return
    }
    held.push({ dtmf, value, atMs })
    if (!dtmf) this.heldBytes += base64Bytes(value)
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
