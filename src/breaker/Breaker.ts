import { randomUUID } from "node:crypto"
import { Duration, Effect, Fiber, Schedule } from "effect"
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

/** The breaker's states (docs/turns-and-breaker.md, "States"). */
export type BreakerState = "closed" | "open" | "probing"
const STATE_VALUE: Record<BreakerState, number> = { closed: 0, open: 1, probing: 2 }

/**
 * What the entry does with a new call (docs/fallback.md, "Shedding"): `admit` to an agent (the
 * breaker is closed), `probe` (the breaker is open and this call took the probe slot: it goes to an
 * agent), or `shed` (the breaker is open: the error fallback answers the entry request).
 */
export type EntryDecision = "admit" | "probe" | "shed"

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
    const { store, config, environments, metrics } = yield* Effect.all({
      store: BreakerStore,
      config: AppConfig,
      environments: Environments,
      metrics: BreakerMetrics
    })
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
      metrics.countOccurrence(agentId, environmentId)
      const tripped = count >= settings.threshold
      if (tripped) {
        metrics.countTrip(agentId, environmentId)
        const trip: BreakerTrip = { agentId, environmentId, sessionId, count, threshold: settings.threshold, origin }
        yield* Effect.logWarning("no-response breaker tripped", { agentId, environmentId, sessionId, count, threshold: settings.threshold })
        seenOpen.add(environmentKey(agentId, environmentId))
        setState(agentId, environmentId, "open")
        dispatch(trip)
        yield* guarded(store.publishTrip(trip), Effect.void, "breaker.publishTrip").pipe(Effect.orDie)
      }
      return { count, tripped } satisfies TimeoutOutcome
    })

    /** Environments this instance saw open (decided an entry on, or tripped): their close is logged here. */
    const seenOpen = new Set<string>()
    /** Environments whose first shed call this instance has logged since it saw them open. */
    const shedLogged = new Set<string>()
    const setState = (agentId: string, environmentId: string, state: BreakerState) =>
      metrics.setState(agentId, environmentId, STATE_VALUE[state])
    const closed = (agentId: string, environmentId: string, why: string) =>
      Effect.suspend(() => {
        const key = environmentKey(agentId, environmentId)
        setState(agentId, environmentId, "closed")
        shedLogged.delete(key)
        return seenOpen.delete(key) ? Effect.logInfo("no-response breaker closed", { agentId, environmentId, why }) : Effect.void
      })

    /**
     * A voiced agent response: the environment's occurrences are forgotten (docs/turns-and-breaker.md,
     * "Breaker rules"), and with them its probe slot: an open breaker closes.
     */
    const recordResponse = (agentId: string, environmentId: string) =>
      Effect.zipRight(
        local.clear(agentId, environmentId),
        guarded(store.clear(agentId, environmentId), Effect.succeed(false), "breaker.clear").pipe(Effect.orDie)
      ).pipe(
        Effect.flatMap((probing) =>
          Effect.suspend(() => {
            const key = environmentKey(agentId, environmentId)
            if (probing) seenOpen.add(key)
            return seenOpen.has(key) ? closed(agentId, environmentId, probing ? "the probe call's agent answered" : "an agent answered") : Effect.void
          })
        )
      )

    /** Occurrences at or over the threshold in the window (no voiced answer since: an answer clears them). */
    const countNow = (agentId: string, environmentId: string, windowSeconds: number) =>
      guarded(store.count(agentId, environmentId, windowSeconds), local.count(agentId, environmentId, windowSeconds), "breaker.count").pipe(Effect.orDie)

    /** The environment's state now (docs/turns-and-breaker.md, "States"). */
    const stateOf = (agentId: string, environmentId: string, settings: BreakerSettings) =>
      Effect.gen(function* () {
        const count = yield* countNow(agentId, environmentId, settings.windowSeconds)
        if (count < settings.threshold) return "closed" as BreakerState
        const probe = yield* guarded(store.probe(agentId, environmentId), local.probe(agentId, environmentId), "breaker.probe").pipe(Effect.orDie)
        return (probe === null ? "open" : "probing") as BreakerState
      })

    /**
     * The entry's decision for a new call of the environment (docs/fallback.md, "Shedding"): while
     * the breaker is open, the first call of each BREAKER_PROBE_INTERVAL (fleet-wide, through the
     * store's probe slot) is the probe and goes to an agent; every other one is shed.
     */
    const decideEntry = Effect.fn("Breaker.decideEntry")(function* (session: SessionRef, settings: BreakerSettings) {
      const { agentId, environmentId, sessionId } = session
      const key = environmentKey(agentId, environmentId)
      const count = yield* countNow(agentId, environmentId, settings.windowSeconds)
      if (count < settings.threshold) {
        if (seenOpen.has(key)) yield* closed(agentId, environmentId, "the window has no occurrences over the threshold")
        return "admit" as EntryDecision
      }
      seenOpen.add(key)
      const intervalSeconds = Duration.toMillis(config.breakerProbeInterval) / 1000
      const probe = yield* guarded(
        store.claimProbe(agentId, environmentId, sessionId, intervalSeconds),
        local.claimProbe(agentId, environmentId, sessionId, intervalSeconds),
        "breaker.claimProbe"
      ).pipe(Effect.orDie)
      setState(agentId, environmentId, "probing")
      if (probe) {
        yield* Effect.logInfo("no-response breaker open: this call is the probe and goes to an agent", { agentId, environmentId, sessionId, count })
        return "probe" as EntryDecision
      }
      metrics.countShedCall(agentId, environmentId)
      if (!shedLogged.has(key)) {
        shedLogged.add(key)
        yield* Effect.logWarning("no-response breaker open: shedding new calls at the entry", { agentId, environmentId, sessionId, count, threshold: settings.threshold })
      }
      return "shed" as EntryDecision
    })

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
      stateOf,
      decideEntry,
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
