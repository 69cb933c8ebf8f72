import { Chunk, ConfigProvider, Duration, Layer, ManagedRuntime, TestClock, TestContext, TestServices } from "effect"
import type { FastifyInstance } from "fastify"
import { inject } from "vitest"
import { HttpApp } from "../../src/http/HttpApp.js"
import { appServicesLayer, DomainLive, FoundationLive, LoggingLive, TelephonyLive, TurnsLive } from "../../src/layers.js"

export const ADMIN_KEY = "test-admin-key-0123456789"
export const TEST_SECRETS_KEY = Buffer.alloc(32, 7).toString("base64")
export const adminAuth = { authorization: `Bearer ${ADMIN_KEY}` }

export type StoreKind = "memory" | "redis"

export const testConfigLayer = (env: Record<string, string> = {}) =>
  Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({ ADMIN_API_KEY: ADMIN_KEY, ...env }))))

/** Unique ids keep tests that share one Redis out of each other's keys. */
let counter = 0
export const uniqueId = (prefix: string) => `${prefix}_${process.pid}_${Date.now().toString(36)}_${(counter++).toString(36)}`

export const configFor = (kind: StoreKind, env: Record<string, string> = {}) =>
  kind === "redis"
    ? { REDIS_URL: inject("redisUrl"), SECRETS_KEY: TEST_SECRETS_KEY, REDIS_KEY_PREFIX: `${uniqueId("t")}:`, INSTANCE_ID: uniqueId("i"), ...env }
    : env

/** Tests are quiet unless they ask for logs. */
const quiet = (env: Record<string, string>) => ({ LOG_LEVEL: "none", ...env })

/** A fixed instant for apps on the TestClock: time starts here and moves only when the test adjusts it. */
export const TEST_CLOCK_START = Date.parse("2030-01-01T00:00:00.000Z")

/**
 * Effect's TestClock as the clock of everything built under it (docs/design.md, "One clock"):
 * it reads `startMs` until `TestClock.adjust` moves it, and a sleep wakes only when it is moved past.
 */
export const testClockLayer = (startMs: number = TEST_CLOCK_START) =>
  TestClock.live(TestClock.makeData(startMs, Chunk.empty())).pipe(
    Layer.provide(Layer.merge(TestServices.liveLayer(), TestServices.annotationsLayer())),
    Layer.provide(TestContext.LiveContext)
  )

export interface TestAppOptions {
  /** `"test"`: the app's Clock is a TestClock from TEST_CLOCK_START (move it with TestApp.adjustClock). */
  readonly clock?: "live" | "test"
}

/**
 * The production graph's pieces (src/layers.ts) over test configuration, and with `clock: "test"`
 * over the TestClock: the only other thing a test replaces. A Redis-backed app gets a fresh
 * REDIS_KEY_PREFIX, so tests sharing one Redis stay out of each other's keys and queues.
 */
export const withTestConfig = <A, E>(layer: Layer.Layer<A, E, never>, kind: StoreKind, env: Record<string, string> = {}, options: TestAppOptions = {}) =>
  layer.pipe(
    Layer.provide(LoggingLive),
    Layer.provide(testConfigLayer(quiet(configFor(kind, env)))),
    Layer.provide(options.clock === "test" ? testClockLayer() : Layer.empty)
  )

/** Configuration, stores, environments, API keys, the outbox and carrier REST, as production builds them. */
export const domainLayer = (kind: StoreKind, env: Record<string, string> = {}) =>
  withTestConfig(TelephonyLive.pipe(Layer.provideMerge(DomainLive), Layer.provideMerge(FoundationLive)), kind, env)

/** Turn timing and the no-response breaker, as production builds them (the store follows REDIS_URL). */
export const turnsLayer = TurnsLive

export interface TestApp {
  readonly app: FastifyInstance
  readonly runtime: ManagedRuntime.ManagedRuntime<Layer.Layer.Success<typeof appServicesLayer>, unknown>
  readonly close: () => Promise<void>
  /** Moves the app's TestClock (an app made with `clock: "test"`), running what was due by then. */
  readonly adjustClock: (duration: Duration.DurationInput) => Promise<void>
}

/** Builds the production services, the HTTP app included (not listening), over the chosen store; `close` releases everything. */
export const makeTestApp = async (kind: StoreKind = "memory", env: Record<string, string> = {}, options: TestAppOptions = {}): Promise<TestApp> => {
  const runtime = ManagedRuntime.make(withTestConfig(appServicesLayer, kind, env, options))
  const { app } = await runtime.runPromise(HttpApp)
  const adjustClock = (duration: Duration.DurationInput) => {
    if (options.clock !== "test") throw new Error("adjustClock: this app runs on the live clock (make it with { clock: \"test\" })")
    return runtime.runPromise(TestClock.adjust(duration))
  }
  return { app, runtime, close: () => runtime.dispose(), adjustClock }
}
