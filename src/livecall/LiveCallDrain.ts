import { Duration, Effect, Layer, Option } from "effect"
import { AgentPool } from "../agent/AgentPool.js"
import { AppConfig } from "../config/AppConfig.js"
import { SessionEnding, shutdownError } from "./LiveCall.js"
import { LiveCalls } from "./LiveCalls.js"

/** How long cut calls get to run their rescue and record their end during shutdown. */
const CUT_GRACE = Duration.seconds(15)

/**
 * Graceful shutdown of live calls (docs/calls.md, "Shutdown"): no new calls or dial-in agents, live
 * calls run on for up to SHUTDOWN_DRAIN_TIMEOUT, then the rest are cut (each through its
 * LiveCall.end, hard error `shutdown`, so the rescue runs) and get a short grace to record their
 * end; what still runs after that is interrupted with LiveCalls' scope.
 */
export class LiveCallDrain extends Effect.Service<LiveCallDrain>()("callgate/LiveCallDrain", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const calls = yield* LiveCalls
    const pool = yield* AgentPool

    const drain = Effect.gen(function* () {
      yield* calls.stopOpening
      yield* pool.stopAccepting
      if (calls.liveCount() === 0) return
      yield* Effect.logInfo("draining live calls", { live: calls.liveCount(), timeout: Duration.format(config.shutdownDrainTimeout) })
      // Drain runs as a finalizer, where everything is uninterruptible: the waits are made
      // interruptible again so their timeouts can end them.
      const drained = yield* calls.awaitIdle.pipe(Effect.interruptible, Effect.timeoutOption(config.shutdownDrainTimeout))
      if (Option.isSome(drained)) return
      yield* Effect.logWarning("drain timeout reached: cutting live calls", { live: calls.liveCount() })
      calls.endAll(SessionEnding.Failed({ error: shutdownError() }))
      yield* calls.awaitIdle.pipe(Effect.interruptible, Effect.timeoutOption(CUT_GRACE))
    })

    return { drain } as const
  })
}) {}

/**
 * Drains live calls when the app stops. Merged beside the HTTP server layer (src/layers.ts), so it
 * is released before the HTTP app closes its sockets.
 */
export const LiveCallDrainLive = Layer.scopedDiscard(Effect.flatMap(LiveCallDrain, (drain) => Effect.addFinalizer(() => drain.drain)))
