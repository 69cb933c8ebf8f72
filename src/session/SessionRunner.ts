import { randomBytes } from "node:crypto"
import { Cause, Deferred, Duration, Effect, Exit, Fiber, FiberMap, Option, Queue } from "effect"
import { MULAW_8K } from "../kernel/AudioFormat.js"
import { AgentConnector } from "../agent/AgentConnector.js"
import { AppConfig } from "../config/AppConfig.js"
import { HardError } from "../kernel/HardError.js"
import { CloseCode } from "../frames/WireSocket.js"
import { traceparentOf, withSessionSpan } from "../observability/Tracing.js"
import { type CallSession, SessionEnding } from "./CallSession.js"
import { SessionLifecycle } from "./SessionLifecycle.js"
import type { Session } from "./SessionSchema.js"

const newStreamSid = () => `MZ${randomBytes(16).toString("hex")}`

/** The hard error of a session cut because callgate is shutting down. */
export const shutdownError = () => new HardError({ kind: "shutdown", message: "callgate shut down during the call." })

/**
 * Runs each live session as its own fiber (docs/design.md, "The path of a rescue", step 4): the
 * agent is sought and the record written while the call relays; once the session's ending stands
 * (or SESSION_MAX_DURATION passes) the fiber acts on it through `SessionLifecycle.finish`. The
 * fibers sit in one FiberMap keyed by session id, in this service's scope, so the drain at shutdown
 * (SessionDrain) can wait for them and whatever is left is interrupted when the app stops.
 */
export class SessionRunner extends Effect.Service<SessionRunner>()("callgate/SessionRunner", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const lifecycle = yield* SessionLifecycle
    const connector = yield* AgentConnector

    const fibers = yield* FiberMap.make<string, void, never>()
    const fork = yield* FiberMap.runtime(fibers)<never>()

    /**
     * SESSION_MAX_DURATION, for every session at once: when each running session started (Effect
     * clock), in starting order, which with one duration for all is also the order they expire in.
     * One fiber sleeps until the oldest is due and ends it with Timeout; sessions that end first
     * leave the map, so a wake-up for one of them only sets the next.
     */
    const clock = yield* Effect.clock
    const maxDurationMs = Duration.toMillis(config.sessionMaxDuration)
    const startedAt = new Map<string, { readonly relay: CallSession; readonly atMs: number }>()
    const timed = yield* Queue.sliding<true>(1)
    const nextExpiry = Effect.suspend(() => {
      const oldest = startedAt.values().next()
      if (oldest.done === true) return Queue.take(timed)
      const dueIn = oldest.value.atMs + maxDurationMs - clock.unsafeCurrentTimeMillis()
      if (dueIn > 0) return Effect.sleep(dueIn)
      startedAt.delete(oldest.value.relay.info.sessionId)
      oldest.value.relay.end(SessionEnding.Timeout())
      return Effect.void
    })
    yield* nextExpiry.pipe(Effect.forever, Effect.forkScoped)

    /** Finds the agent and connects it, unless the session ends first. */
    const connectAgent = (relay: CallSession, streamSid: string, traceparent: string) =>
      Effect.gen(function* () {
        const target = yield* lifecycle.agentTarget(relay.info)
        yield* Effect.annotateCurrentSpan("callgate.agent.mode", target.agentUrl === null ? "dial_in" : "dial_out")
        const agent = yield* connector.acquire(target)
        yield* Effect.annotateCurrentSpan("callgate.agent.outcome", "connected")
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
            Effect.sync(() => relay.end(SessionEnding.Failed({ error })))
          )
        ),
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

    /** The session's fiber: its closed record once its ending was acted on. */
    const runSession = (relay: CallSession, ended: Deferred.Deferred<SessionEnding>): Effect.Effect<Session> =>
      Effect.gen(function* () {
        // The caller is on the line: the agent is sought first, the record is written beside it.
        // The agent leg is a span of its own, open until the session's scope closes.
        const session = yield* Effect.currentSpan.pipe(Effect.orDie)
        const leg = yield* Effect.makeSpanScoped("callgate.agent.leg", { attributes: { "callgate.session.id": relay.info.sessionId } })
        const connecting = yield* Effect.fork(connectAgent(relay, newStreamSid(), traceparentOf(session)).pipe(Effect.withParentSpan(leg)))
        const recording = yield* Effect.fork(lifecycle.begin(relay.info))
        const observed = yield* lifecycle.observerFor(relay.info, {
          fail: (error) => {
            const standing = relay.end(SessionEnding.Failed({ error }))
            return standing._tag === "Failed" && standing.error === error
          }
        })
        relay.observeWith(observed.observer)
        // SESSION_MAX_DURATION is this service's one timer (below), not a timer per session.
        const ending = yield* Deferred.await(ended)
        yield* Fiber.interrupt(connecting)
        // The end is recorded over the start, so the start must be written first.
        yield* Fiber.join(recording)
        return yield* lifecycle.finish(relay, ending, observed).pipe(Effect.uninterruptible)
      }).pipe(
        // The session's scope: its turn observer's watchdog and store writes end with the session.
        Effect.scoped,
        // Cut without a chance to finish (the shutdown grace ran out): at least close both sockets.
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            relay.end(SessionEnding.Failed({ error: shutdownError() }))
            relay.release(CloseCode.goingAway, "callgate is shutting down")
            relay.carrier.close(CloseCode.goingAway, "callgate is shutting down")
          })
        ),
        Effect.annotateLogs({ sessionId: relay.info.sessionId, agentId: relay.info.agentId, environmentId: relay.info.environmentId }),
        withSessionSpan(relay.info.sessionId, {
          "callgate.session.id": relay.info.sessionId,
          "callgate.agent.id": relay.info.agentId,
          "callgate.environment.id": relay.info.environmentId,
          "callgate.provider": relay.info.provider,
          "callgate.direction": relay.info.direction,
          "callgate.call.id": relay.info.call.callId
        })
      )

    /**
     * Starts the session's fiber; synchronous, so the caller's frames are never held up. `done` is
     * called once when the fiber ends: with the closed record, or none when the session was cut
     * at shutdown before it could finish.
     */
    const start = (relay: CallSession, ended: Deferred.Deferred<SessionEnding>, done: (record: Option.Option<Session>) => void): void => {
      const { sessionId } = relay.info
      startedAt.set(sessionId, { relay, atMs: clock.unsafeCurrentTimeMillis() })
      if (startedAt.size === 1) Queue.unsafeOffer(timed, true)
      fork(
        sessionId,
        runSession(relay, ended).pipe(
          Effect.onExit((exit) =>
            Effect.sync(() => {
              startedAt.delete(sessionId)
              done(Exit.isSuccess(exit) ? Option.some(exit.value) : Option.none())
            })
          ),
          Effect.asVoid
        )
      )
    }

    return {
      start,
      /** Waits until no session's fiber runs. */
      awaitIdle: FiberMap.awaitEmpty(fibers)
    } as const
  })
}) {}
