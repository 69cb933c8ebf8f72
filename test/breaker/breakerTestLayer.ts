import { Effect, Layer, Logger } from "effect"
import { Breaker, type BreakerSettings, type SessionRef } from "../../src/breaker/Breaker.js"
import type { BreakerStore } from "../../src/breaker/BreakerStore.js"
import { MemoryBreakerStoreLive } from "../../src/breaker/MemoryBreakerStore.js"
import { type NoResponseTrip, startResponseWatchdog, type WatchdogOptions } from "../../src/breaker/ResponseWatchdog.js"
import { DomainLive, FoundationLive, turnsOver } from "../../src/layers.js"
import { testConfigLayer, uniqueId } from "../support/testApp.js"

/** Collects log lines (level and message) instead of printing them. */
export const captureLogs = (lines: Array<{ level: string; message: string }>) =>
  Logger.replace(
    Logger.defaultLogger,
    Logger.make(({ logLevel, message }) => {
      const first = Array.isArray(message) ? message[0] : message
      lines.push({ level: logLevel.label, message: String(first) })
    })
  )

/**
 * The production graph's turn timing and breaker (src/layers.ts `turnsOver`) over the given breaker
 * store (memory by default), the domain and foundation in memory, and the given logger (off by default).
 */
export const breakerLayer = (
  store: Layer.Layer<BreakerStore, unknown, never> = MemoryBreakerStoreLive,
  env: Record<string, string> = {},
  logger: Layer.Layer<never> = Logger.remove(Logger.defaultLogger)
) =>
  turnsOver(store).pipe(
    Layer.provideMerge(DomainLive),
    Layer.provideMerge(FoundationLive),
    Layer.provide(testConfigLayer(env)),
    Layer.provideMerge(logger)
  )

export const newEnvironment = () => ({ agentId: uniqueId("agent"), environmentId: uniqueId("env") })

export const sessionOf = (env: { agentId: string; environmentId: string }, sessionId: string = uniqueId("session")): SessionRef => ({
  ...env,
  sessionId
})

/** Settings a test may change between evaluations, as /v1 would. */
export const settingsBox = (initial: BreakerSettings) => {
  let current = initial
  return {
    get: Effect.sync(() => current),
    set: (next: Partial<BreakerSettings>) => {
      current = { ...current, ...next }
    }
  }
}

export interface RescueSeen extends NoResponseTrip {
  readonly sessionId: string
}

/**
 * A watchdog whose rescues land in `rescues` (or go to `onRescue`): it holds the trip subscription
 * the way a live call does (livecall/LiveCall.ts): every trip of the environment is put to
 * `rescuedBy`. The watchdog is registered for `settle` while the scope lives.
 */
export const watch = (
  session: SessionRef,
  settings: Effect.Effect<BreakerSettings, unknown>,
  rescues: Array<RescueSeen>,
  extra: Partial<WatchdogOptions> = {},
  onRescue: (trip: NoResponseTrip) => void = (trip) => void rescues.push({ ...trip, sessionId: session.sessionId })
) =>
  Effect.gen(function* () {
    const breaker = yield* Breaker
    const watchdog = yield* startResponseWatchdog({ session, settings, ...extra })
    yield* breaker.subscribeTrips(session.agentId, session.environmentId, (trip) => {
      const rescue = watchdog.rescuedBy(trip)
      if (rescue !== undefined) onRescue(rescue)
    })
    yield* watching(watchdog)
    return watchdog
  })

/** What `settle` waits for: the watchdogs of the running test. */
const live = new Set<{ readonly idle: Effect.Effect<void> }>()

/** Registers a watchdog (or a watched call) for `settle` while the current scope lives. */
export const watching = (watched: { readonly idle: Effect.Effect<void> }) =>
  Effect.acquireRelease(
    Effect.sync(() => void live.add(watched)),
    () => Effect.sync(() => void live.delete(watched))
  )

/**
 * Waits until every registered watchdog has nothing to do until the next event or deadline
 * (ResponseWatchdog.idle: no evaluation runs, no alarm is due). Then nothing more happens until
 * the test acts (an event, the TestClock moving).
 */
export const settle: Effect.Effect<void> = Effect.suspend(() => Effect.forEach([...live], (watched) => watched.idle, { discard: true }))
