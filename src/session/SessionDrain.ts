import { Duration, Effect, Layer, Option } from "effect"
import { AgentPool } from "../agent/AgentPool.js"
import { AppConfig } from "../config/AppConfig.js"
import { SessionEnding } from "./CallSession.js"
import { SessionRegistry } from "./SessionRegistry.js"
import { SessionRunner, shutdownError } from "./SessionRunner.js"

/** How long cut sessions get to run their rescue and record their end during shutdown. */
const CUT_GRACE = Duration.seconds(15)

/**
 * Graceful shutdown of live calls (docs/calls.md, "Shutdown"): no new calls or dial-in agents, live
 * calls run on for up to SHUTDOWN_DRAIN_TIMEOUT, then the rest are cut (hard error `shutdown`, so
 * the rescue runs) and get a short grace to record their end.
 */
export class SessionDrain extends Effect.Service<SessionDrain>()("callgate/SessionDrain", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const registry = yield* SessionRegistry
    const runner = yield* SessionRunner
    const pool = yield* AgentPool

    const drain = Effect.gen(function* () {
      yield* registry.stopOpening
      yield* pool.stopAccepting
      if (registry.liveCount() === 0) return
      yield* Effect.logInfo("draining live calls", { live: registry.liveCount(), timeout: Duration.format(config.shutdownDrainTimeout) })
      // Drain runs as a finalizer, where everything is uninterruptible: the waits are made
      // interruptible again so their timeouts can end them.
      const drained = yield* runner.awaitIdle.pipe(Effect.interruptible, Effect.timeoutOption(config.shutdownDrainTimeout))
      if (Option.isSome(drained)) return
      yield* Effect.logWarning("drain timeout reached: cutting live calls", { live: registry.liveCount() })
      registry.endAll(SessionEnding.Failed({ error: shutdownError() }))
      yield* runner.awaitIdle.pipe(Effect.interruptible, Effect.timeoutOption(CUT_GRACE))
    })

    return { drain } as const
  })
}) {}

/**
 * Drains live calls when the app stops. Merged beside the HTTP server layer (src/layers.ts), so it
 * is released before the HTTP app closes its sockets.
 */
export const SessionDrainLive = Layer.scopedDiscard(Effect.flatMap(SessionDrain, (sessions) => Effect.addFinalizer(() => sessions.drain)))
