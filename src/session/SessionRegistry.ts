import { randomBytes } from "node:crypto"
import { Cause, Deferred, Duration, Effect, Either, Exit, Fiber, FiberId, FiberMap, Layer, Option, Queue } from "effect"
import { Counter, Gauge } from "prom-client"
import { AgentConnector } from "../agent/AgentConnector.js"
import { AgentPool } from "../agent/AgentPool.js"
import { AppConfig } from "../config/AppConfig.js"
import { Metrics } from "../observability/Metrics.js"
import { providerOf } from "../core/Carrier.js"
import { CarrierCallEvents } from "./CarrierCallEvents.js"
import type { TurnObserver } from "../turns/TurnObserver.js"
import type { StreamOpening } from "../core/CallLegs.js"
import { CallSession, SessionEnding } from "./CallSession.js"
import type { FrameProblem } from "../wire/FrameDecoding.js"
import { HardError } from "../core/HardError.js"
import { newSessionId, type SessionInfo } from "../core/SessionInfo.js"
import { SessionLifecycle } from "./SessionLifecycle.js"
import type { Session } from "./SessionSchema.js"
import { CloseCode } from "../core/WireSocket.js"

/** Re-exported for the callers that mint a session before its stream opens (outbound calls). */
export { newSessionId } from "../core/SessionInfo.js"
const newStreamSid = () => `MZ${randomBytes(16).toString("hex")}`

/** How long cut sessions get to run their rescue and record their end during shutdown. */
const CUT_GRACE = Duration.seconds(15)

/** An outbound call callgate placed, waiting for its media stream (the carrier answered it). */
export interface OutboundExpectation {
  readonly agentId: string
  readonly environmentId: string
  /** When the call was placed: the session's createdAt. */
  readonly createdAt: Date
  readonly metadata?: Readonly<Record<string, string>> | undefined
  /** The carrier's call id once the carrier accepted the call; a stream for another call is refused. */
  callId?: string | undefined
  /** Called once, synchronously, when the stream opened the session. */
  readonly opened: (live: LiveSession) => void
}

/** A live session as the call-control API sees it. */
export interface LiveSession {
  readonly info: SessionInfo
  /** Ends the session with `ending` unless it is already ending; true when this ending stands. */
  readonly end: (ending: SessionEnding) => boolean
  /** The session's closed record once its ending was acted on (none if it was cut at shutdown). */
  readonly settled: Effect.Effect<Option.Option<Session>>
}

/**
 * Every live session of this instance: opened synchronously by a carrier stream at `start`, run
 * as a scoped fiber (FiberMap keyed by session id), reachable by carrier call id (a Telnyx
 * call.hangup ends it).
 */
export class SessionRegistry extends Effect.Service<SessionRegistry>()("callgate/SessionRegistry", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const lifecycle = yield* SessionLifecycle
    const connector = yield* AgentConnector
    const pool = yield* AgentPool
    const metrics = yield* Metrics
    const callEvents = yield* CarrierCallEvents

    const bySession = new Map<string, CallSession>()
    const settledBy = new Map<string, Deferred.Deferred<Option.Option<Session>>>()
    /** Outbound calls placed from this instance whose stream has not opened yet, by session id. */
    const expected = new Map<string, OutboundExpectation>()
    const byCall = new Map<string, CallSession>()
    let draining = false

    new Gauge({
      name: "callgate_sessions_active",
      help: "Call sessions live on this instance",
      registers: [metrics.registry],
      collect() {
        this.set(bySession.size)
      }
    })
    const refusals = new Counter({
      name: "callgate_stream_refusals_total",
      help: "Authenticated media streams refused before a session opened, by reason",
      labelNames: ["reason"] as const,
      registers: [metrics.registry]
    })

    const fibers = yield* FiberMap.make<string, void, never>()
    const run = yield* FiberMap.runtime(fibers)<never>()

    const unregister = (relay: CallSession) => {
      bySession.delete(relay.info.sessionId)
      const settled = settledBy.get(relay.info.sessionId)
      settledBy.delete(relay.info.sessionId)
      if (settled !== undefined) Deferred.unsafeDone(settled, Exit.succeed(Option.none()))
      if (byCall.get(relay.info.call.callId) === relay) byCall.delete(relay.info.call.callId)
    }

    /** Finds the agent and connects it, unless the session ends first. */
    const connectAgent = (relay: CallSession, streamSid: string) =>
      Effect.gen(function* () {
        const target = yield* lifecycle.agentTarget(relay.info)
        const agent = yield* connector.acquire(target)
        const { info } = relay
        relay.attachAgent(agent, {
          sessionId: info.sessionId,
          agentId: info.agentId,
          environmentId: info.environmentId,
          from: info.from ?? "",
          to: info.to ?? "",
          direction: info.direction,
          provider: info.provider,
          streamSid,
          metadata: info.metadata
        })
      }).pipe(
        Effect.catchAll((error) => Effect.sync(() => relay.end(SessionEnding.Failed({ error })))),
        // A bug must not leave the caller waiting for an agent until the maximum duration.
        Effect.catchAllDefect((defect) =>
          Effect.zipRight(
            Effect.logError("connecting the agent failed", Cause.die(defect)),
            Effect.sync(() =>
              relay.end(SessionEnding.Failed({ error: new HardError({ kind: "internal", message: "callgate failed to connect the agent." }) }))
            )
          )
        )
      )

    const runSession = (relay: CallSession, ended: Deferred.Deferred<SessionEnding>) =>
      Effect.gen(function* () {
        // The caller is on the line: the agent is sought first, the record is written beside it.
        const connecting = yield* Effect.fork(connectAgent(relay, newStreamSid()))
        const recording = yield* Effect.fork(lifecycle.begin(relay.info))
        const observed = yield* lifecycle.observerFor(relay.info, {
          fail: (error) => {
            const standing = relay.end(SessionEnding.Failed({ error }))
            return standing._tag === "Failed" && standing.error === error
          }
        })
        relay.observeWith(observed.observer)
        const ending = yield* Deferred.await(ended).pipe(
          Effect.timeoutOption(config.sessionMaxDuration),
          Effect.map(Option.getOrElse(() => relay.end(SessionEnding.Timeout())))
        )
        yield* Fiber.interrupt(connecting)
        // The end is recorded over the start, so the start must be written first.
        yield* Fiber.join(recording)
        const record = yield* lifecycle.finish(relay, ending, observed).pipe(Effect.uninterruptible)
        const settled = settledBy.get(relay.info.sessionId)
        if (settled !== undefined) yield* Deferred.succeed(settled, Option.some(record))
      }).pipe(
        // The session's scope: its turn observer's watchdog and store writes end with the session.
        Effect.scoped,
        // Cut without a chance to finish (the shutdown grace ran out): at least close both sockets.
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            relay.end(SessionEnding.Failed({ error: new HardError({ kind: "shutdown", message: "callgate shut down during the call." }) }))
            relay.release(CloseCode.goingAway, "callgate is shutting down")
            relay.carrier.close(CloseCode.goingAway, "callgate is shutting down")
          })
        ),
        Effect.annotateLogs({ sessionId: relay.info.sessionId, agentId: relay.info.agentId, environmentId: relay.info.environmentId })
      )

    /** Opens a session for a stream whose credentials were checked; synchronous, so no frame is missed. */
    const open = (opening: StreamOpening): Either.Either<void, FrameProblem> => {
      if (draining) {
        refusals.inc({ reason: "draining" })
        return Either.left({ code: CloseCode.tryAgainLater, reason: "callgate is shutting down: no new calls" })
      }
      if (byCall.has(opening.callId)) {
        refusals.inc({ reason: "duplicate_call" })
        return Either.left({ code: CloseCode.policyViolation, reason: "a stream for this call is already open" })
      }
      const outbound = opening.sessionId !== undefined ? expected.get(opening.sessionId) : undefined
      if (opening.sessionId !== undefined) {
        // Only a call this instance placed, still waiting, for the agent and call it was placed for.
        if (
          outbound === undefined ||
          outbound.agentId !== opening.agentId ||
          outbound.environmentId !== opening.environmentId ||
          (outbound.callId !== undefined && outbound.callId !== opening.callId)
        ) {
          refusals.inc({ reason: "unexpected_outbound" })
          return Either.left({ code: CloseCode.policyViolation, reason: "no outbound call is waiting for this stream" })
        }
        expected.delete(opening.sessionId)
      }
      const info: SessionInfo = {
        sessionId: opening.sessionId ?? opening.entrySessionId ?? newSessionId(),
        agentId: opening.agentId,
        environmentId: opening.environmentId,
        provider: providerOf(opening.kind),
        call: { kind: opening.kind, callId: opening.callId, accountSid: opening.accountSid },
        from: opening.from ?? null,
        to: opening.to ?? null,
        direction: opening.direction ?? "inbound",
        streamSid: opening.streamSid,
        reservedAgent: opening.reservedAgent,
        createdAt: outbound?.createdAt ?? new Date(),
        ...(outbound?.metadata !== undefined ? { metadata: outbound.metadata } : {})
      }
      const ended = Deferred.unsafeMake<SessionEnding>(FiberId.none)
      const relay = new CallSession(info, opening.carrier, (ending) => Deferred.unsafeDone(ended, Exit.succeed(ending)))
      opening.carrier.bind(relay)
      bySession.set(info.sessionId, relay)
      settledBy.set(info.sessionId, Deferred.unsafeMake<Option.Option<Session>>(FiberId.none))
      byCall.set(info.call.callId, relay)
      run(info.sessionId, runSession(relay, ended).pipe(Effect.ensuring(Effect.sync(() => unregister(relay)))))
      if (outbound !== undefined) {
        try {
          outbound.opened(Option.getOrThrow(live(info.sessionId)))
        } catch {
          // The placer's bookkeeping must not break the call.
        }
      }
      return Either.void
    }

    // A Telnyx call.hangup (Call Control webhook) ends the session of that call.
    const hangups = yield* callEvents.subscribe
    yield* Queue.take(hangups).pipe(
      Effect.tap((event) =>
        Effect.sync(() => byCall.get(event.callId)?.end(SessionEnding.Completed({ reason: "caller_hangup" })))
      ),
      Effect.forever,
      Effect.forkScoped
    )

    const liveCount = () => bySession.size

    /**
     * Outbound calls (docs/calls.md, "Placing outbound calls"): the placer registers the session
     * before asking the carrier, so the stream of the answered call can open exactly that session.
     * `withdraw` takes an expectation back (the call ended unanswered, or was canceled); false when
     * the stream already opened it (or it was never there).
     */
    const expectOutbound = (sessionId: string, expectation: OutboundExpectation) => void expected.set(sessionId, expectation)
    const withdrawOutbound = (sessionId: string): boolean => expected.delete(sessionId)
    const outboundExpectation = (sessionId: string): Option.Option<OutboundExpectation> => Option.fromNullable(expected.get(sessionId))

    /** The live session with this id on this instance, if any. */
    const live = (sessionId: string): Option.Option<LiveSession> => {
      const relay = bySession.get(sessionId)
      const settled = settledBy.get(sessionId)
      if (relay === undefined || settled === undefined) return Option.none()
      return Option.some({
        info: relay.info,
        end: (ending) => relay.end(ending) === ending,
        settled: Deferred.await(settled)
      })
    }

    /**
     * Graceful shutdown: no new calls or dial-in agents, live calls run on for up to
     * SHUTDOWN_DRAIN_TIMEOUT, then the rest are cut (hard error `shutdown`, so the rescue runs)
     * and get a short grace to record their end.
     */
    const drain = Effect.gen(function* () {
      draining = true
      yield* pool.stopAccepting
      if (liveCount() === 0) return
      yield* Effect.logInfo("draining live calls", { live: liveCount(), timeout: Duration.format(config.shutdownDrainTimeout) })
      // Drain runs as a finalizer, where everything is uninterruptible: the waits are made
      // interruptible again so their timeouts can end them.
      const drained = yield* FiberMap.awaitEmpty(fibers).pipe(Effect.interruptible, Effect.timeoutOption(config.shutdownDrainTimeout))
      if (Option.isSome(drained)) return
      yield* Effect.logWarning("drain timeout reached: cutting live calls", { live: liveCount() })
      for (const relay of bySession.values()) {
        relay.end(
          SessionEnding.Failed({ error: new HardError({ kind: "shutdown", message: "callgate shut down during the call." }) })
        )
      }
      yield* FiberMap.awaitEmpty(fibers).pipe(Effect.interruptible, Effect.timeoutOption(CUT_GRACE))
    })

    return {
      open,
      drain,
      isDraining: (): boolean => draining,
      liveCount,
      live,
      expectOutbound,
      withdrawOutbound,
      outboundExpectation
    } as const
  })
}) {}

/**
 * Drains live calls when the app stops. Merged beside the HTTP server layer (main.ts), so it is
 * released before the HTTP app closes its sockets.
 */
export const SessionDrainLive = Layer.scopedDiscard(
  Effect.flatMap(SessionRegistry, (registry) => Effect.addFinalizer(() => registry.drain))
)
