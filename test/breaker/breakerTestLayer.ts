import { Chunk, Effect, Either, Equal, Fiber, FiberStatus, HashMap, Layer, Logger, MutableRef, SortedSet, Supervisor, TestAnnotation, TestServices } from "effect"
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

/** A watchdog whose rescues land in `rescues`. */
export const watch = (
  session: SessionRef,
  settings: Effect.Effect<BreakerSettings, unknown>,
  rescues: Array<RescueSeen>,
  extra: Partial<WatchdogOptions> = {}
) =>
  startResponseWatchdog({
    session,
    settings,
    onTrip: (trip) => void rescues.push({ ...trip, sessionId: session.sessionId }),
    ...extra
  })

/**
 * Runs a test body with every fiber it forks (watchdogs, their timers, rescue actions) registered
 * as the test's fibers, so `settle` can tell when they have all run up to their next wait (and
 * TestClock.adjust, which looks at the same registry, waits for that before moving time).
 */
export const withTestFibers = <A, E, R>(body: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.gen(function* () {
    const fibers = MutableRef.make(SortedSet.empty<Fiber.RuntimeFiber<unknown, unknown>>(Fiber.Order))
    const supervisor = yield* Supervisor.fibersIn(fibers)
    yield* TestServices.annotate(TestAnnotation.fibers, Either.right(Chunk.of(fibers)))
    return yield* Effect.supervised(body, supervisor)
  })

/** A macrotask: I/O callbacks and timers of the host get their turn (not the Effect clock). */
const macrotask = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

/** The status of every live fiber of the test, or undefined while one of them is running. */
const snapshot = Effect.gen(function* () {
  const registered = yield* TestServices.get(TestAnnotation.fibers)
  if (Either.isLeft(registered)) return yield* Effect.dieMessage("settle needs the test's fibers: run the test body with withTestFibers")
  const fibers = registered.right.pipe(Chunk.flatMap((ref) => Chunk.fromIterable(MutableRef.get(ref))))
  const statuses = yield* Effect.forEach(fibers, (fiber) => Effect.map(fiber.status, (status) => [fiber.id(), status] as const))
  return statuses.some(([, status]) => FiberStatus.isRunning(status)) ? undefined : HashMap.fromIterable(statuses)
})

/**
 * Waits until the test's fibers (watchdogs, rescue actions) have all run up to their next wait:
 * every one done or suspended, with nothing changed across a macrotask. Then nothing more
 * happens until the test acts (an event, the TestClock moving).
 */
export const settle = Effect.gen(function* () {
  for (let round = 0; round < 10_000; round++) {
    const before = yield* snapshot
    yield* macrotask
    if (before === undefined) continue
    const after = yield* snapshot
    if (after !== undefined && Equal.equals(before, after)) return
  }
  return yield* Effect.dieMessage("the test's fibers never settled")
})
