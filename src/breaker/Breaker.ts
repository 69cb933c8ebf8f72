import { randomUUID } from "node:crypto"
import { Effect, Fiber, Schedule } from "effect"
import { addScopeFinalizer } from "../kernel/SessionFibers.js"
import { AppConfig } from "../config/AppConfig.js"
import { Environments } from "../environments/Environments.js"
import { StoreError } from "../kernel/StoreError.js"
import { BreakerMetrics } from "./BreakerMetrics.js"
import { type BreakerTrip, BreakerStore } from "./BreakerStore.js"
import { makeMemoryBreakerStore } from "./MemoryBreakerStore.js"
import { environmentKey } from "../kernel/EnvironmentKey.js"

/** An environment's no-response breaker settings (docs/turns-and-breaker.md, "Parameters"), read afresh for every evaluation. */
export interface BreakerSettings {
  /** Seconds the agent has to begin answering; 0 turns the no-response trigger off. */
  readonly timeoutSeconds: number
  readonly threshold: number
  readonly windowSeconds: number
}

export const breakerSettingsOf = (env: {
  readonly errorFallbackTimeout: number
  readonly errorFallbackOccurrenceThreshold: number
  readonly errorFallbackTimeWindow: number
}): BreakerSettings => ({
  timeoutSeconds: env.errorFallbackTimeout,
  threshold: env.errorFallbackOccurrenceThreshold,
  windowSeconds: env.errorFallbackTimeWindow
})

export interface SessionRef {
  readonly agentId: string
  readonly environmentId: string
  readonly sessionId: string
}

export interface TimeoutOutcome {
  /** Occurrences in the environment's window, this one included. */
  readonly count: number
  /** The count reached the threshold: the fallback runs for this session (and the trip is broadcast). */
  readonly tripped: boolean
}


/**
 * The no-response circuit breaker of docs/turns-and-breaker.md ("Breaker rules"), shared by every session and instance through the
 * BreakerStore. Nothing here runs on the media path: the watchdogs call it from their own fibers.
 *
 * Redis trouble never stops the counting: a store call that fails or takes longer than
 * BREAKER_STORE_TIMEOUT switches this instance to a local in-memory window (one warning), and a
 * probe switches back once Redis answers again (one info line). Occurrences counted locally
 * meanwhile stay local; trips are then only heard on this instance.
 */
export class Breaker extends Effect.Service<Breaker>()("callgate/Breaker", {
  scoped: Effect.gen(function* () {
    const store = yield* BreakerStore
    const config = yield* AppConfig
    const environments = yield* Environments
    const metrics = yield* BreakerMetrics
    const local = yield* makeMemoryBreakerStore
    const scope = yield* Effect.scope
    const origin = randomUUID()
    const timeout = config.breakerStoreTimeout
    const lastSettings = new Map<string, BreakerSettings>()
    const handlers = new Map<string, Set<(trip: BreakerTrip) => void>>()
    let degraded = false
    let subscriptionWarned = false

    const dispatch = (trip: BreakerTrip) => {
      const listeners = handlers.get(environmentKey(trip.agentId, trip.environmentId))
      if (listeners === undefined) return
      for (const handler of [...listeners]) {
        try {
          handler(trip)
        } catch {
          // One session's handler must not keep the trip from the others.
        }
      }
    }

    const recover = store.ping.pipe(
      Effect.timeoutFail({ duration: timeout, onTimeout: () => new StoreError({ operation: "breaker.ping (timed out)" }) }),
      Effect.retry(Schedule.spaced("1 second")),
      Effect.zipRight(
        Effect.sync(() => {
          degraded = false
          metrics.storeDegraded.set(0)
        })
      ),
      Effect.zipRight(Effect.logInfo("breaker store reachable again: counting in the shared window"))
    )

    const degrade = (error: StoreError) =>
      Effect.suspend(() => {
        if (degraded) return Effect.void
        degraded = true
        metrics.storeDegraded.set(1)
        return Effect.logWarning("breaker store unreachable or slow: counting occurrences on this instance until it is back", {
          operation: error.operation
        }).pipe(Effect.zipRight(Effect.forkIn(recover, scope)), Effect.asVoid)
      })

    /**
     * The store call, or the local fallback while the store is away or too slow. An in-process
     * store is not timed: a timeout (two fibers and a timer per call) would guard nothing there.
     * The environments' store is embedded exactly when the breaker's is (one REDIS_URL decides
     * every store, layers.ts), so the settings read below follows the same rule.
     */
    const timed = store.inProcess !== true
    const guarded = <A, E1, E2>(
      remote: Effect.Effect<A, E1>,
      fallback: Effect.Effect<A, E2>,
      operation: string
    ): Effect.Effect<A, Exclude<E1, StoreError> | E2> =>
      Effect.suspend(() => {
        if (degraded) return fallback
        const bounded = timed
          ? remote.pipe(Effect.timeoutFail({ duration: timeout, onTimeout: () => new StoreError({ operation: `${operation} (timed out)` }) }))
          : remote
        return bounded.pipe(
          Effect.catchIf(
            (error): error is Extract<E1 | StoreError, StoreError> => error instanceof StoreError,
            (error) => Effect.zipRight(degrade(error), fallback)
          )
        )
      })

    // Hear trips from every instance; keep trying while Redis is away. Start-up waits briefly
    // for the subscription so early trips are not missed, but never blocks on a dead store.
    const subscription = yield* store
      .subscribeTrips((trip) => {
        if (trip.origin !== origin) dispatch(trip)
      })
      .pipe(
        Effect.tapError((error) =>
          Effect.suspend(() => {
            // While the store is unreachable its connection has said so: nothing to add.
            if (subscriptionWarned || error.unreachable) return Effect.void
            subscriptionWarned = true
            return Effect.logWarning("breaker trip subscription failed; retrying every second", { operation: error.operation })
          })
        ),
        Effect.retry(Schedule.spaced("1 second")),
        Effect.forkScoped
      )
    yield* Fiber.await(subscription).pipe(Effect.timeout("2 seconds"), Effect.ignore)

    const recordTimeout = Effect.fn("Breaker.recordTimeout")(function* (session: SessionRef, settings: BreakerSettings) {
      const { agentId, environmentId, sessionId } = session
      const count = yield* guarded(
        store.recordOccurrence(agentId, environmentId, sessionId, settings.windowSeconds),
        local.recordOccurrence(agentId, environmentId, sessionId, settings.windowSeconds),
        "breaker.recordOccurrence"
      ).pipe(Effect.orDie)
      metrics.occurrences.inc({ agent: agentId, environment: environmentId })
      const tripped = count >= settings.threshold
      if (tripped) {
        metrics.trips.inc({ agent: agentId, environment: environmentId })
        const trip: BreakerTrip = { agentId, environmentId, sessionId, count, threshold: settings.threshold, origin }
        yield* Effect.logWarning("no-response breaker tripped", { agentId, environmentId, sessionId, count, threshold: settings.threshold })
        dispatch(trip)
        yield* guarded(store.publishTrip(trip), Effect.void, "breaker.publishTrip").pipe(Effect.orDie)
      }
      return { count, tripped } satisfies TimeoutOutcome
    })

    /** A voiced agent response: the environment's occurrences are forgotten (docs/turns-and-breaker.md, "Breaker rules"). */
    const recordResponse = (agentId: string, environmentId: string) =>
      Effect.zipRight(
        local.clear(agentId, environmentId),
        guarded(store.clear(agentId, environmentId), Effect.void, "breaker.clear").pipe(Effect.orDie)
      )

    /**
     * The environment's settings as configured now (so /v1 changes apply to the next evaluation);
     * while the store is away, the last ones seen.
     */
    const settingsFor = (agentId: string, environmentId: string) => {
      const key = environmentKey(agentId, environmentId)
      const cached = Effect.suspend(() => {
        const known = lastSettings.get(key)
        return known === undefined
          ? Effect.fail(new StoreError({ operation: "breaker.settings (store unreachable, none cached)" }))
          : Effect.succeed(known)
      })
      return guarded(
        Effect.map(environments.stored(agentId, environmentId), (env) => {
          const settings = breakerSettingsOf(env)
          lastSettings.set(key, settings)
          return settings
        }),
        cached,
        "breaker.settings"
      )
    }

    /** Calls `handler` (synchronously) for every trip of the environment, from any instance, while the scope lives. */
    const subscribeTrips = (agentId: string, environmentId: string, handler: (trip: BreakerTrip) => void) =>
      // One per session: a plain scope finalizer rather than acquireRelease (addScopeFinalizer).
      Effect.uninterruptible(
        Effect.suspend(() => {
          const key = environmentKey(agentId, environmentId)
          let listeners = handlers.get(key)
          if (listeners === undefined) handlers.set(key, (listeners = new Set()))
          listeners.add(handler)
          return addScopeFinalizer(
            Effect.sync(() => {
              const current = handlers.get(key)
              current?.delete(handler)
              if (current?.size === 0) handlers.delete(key)
            })
          )
        })
      )

    return {
      recordTimeout,
      recordResponse,
      settingsFor,
      subscribeTrips,
      count: (agentId: string, environmentId: string, windowSeconds: number) =>
        guarded(
          store.count(agentId, environmentId, windowSeconds),
          local.count(agentId, environmentId, windowSeconds),
          "breaker.count"
        ).pipe(Effect.orDie),
      /** True while this instance counts locally because the store is unreachable. */
      isDegraded: Effect.sync(() => degraded)
    } as const
  })
}) {}
