import { Effect, Layer, Logger } from "effect"
import { Breaker, type BreakerSettings, type SessionRef } from "../../src/breaker/Breaker.js"
import { BreakerMetrics } from "../../src/breaker/BreakerMetrics.js"
import type { BreakerStore } from "../../src/breaker/BreakerStore.js"
import { MemoryBreakerStoreLive } from "../../src/breaker/MemoryBreakerStore.js"
import { type Rescue, startResponseWatchdog, type WatchdogOptions } from "../../src/breaker/ResponseWatchdog.js"
import { AppConfig } from "../../src/config/AppConfig.js"
import { Environments } from "../../src/environments/Environments.js"
import { Metrics } from "../../src/observability/Metrics.js"
import { SecretBox } from "../../src/secrets/SecretBox.js"
import { MemoryEnvironmentStoreLive } from "../../src/environments/MemoryEnvironmentStore.js"
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

/** Breaker over the given store layer (memory by default), with environments in memory and logs off. */
export const breakerLayer = (
  store: Layer.Layer<BreakerStore, unknown, never> = MemoryBreakerStoreLive,
  env: Record<string, string> = {},
  logger: Layer.Layer<never> = Logger.remove(Logger.defaultLogger)
) => {
  const config = AppConfig.Default.pipe(Layer.provide(testConfigLayer(env)))
  const infra = Layer.mergeAll(MemoryEnvironmentStoreLive, Metrics.Default, config, store).pipe(
    Layer.provideMerge(SecretBox.Default.pipe(Layer.provide(config)))
  )
  return Breaker.Default.pipe(
    Layer.provideMerge(Layer.mergeAll(Environments.Default, BreakerMetrics.Default).pipe(Layer.provideMerge(infra))),
    Layer.provideMerge(logger)
  )
}

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

export interface RescueSeen extends Rescue {
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
    onTrip: (rescue) => Effect.sync(() => void rescues.push({ ...rescue, sessionId: session.sessionId })),
    ...extra
  })

/** Lets forked fibers (watchdogs, rescue actions) run up to their next wait. */
export const settle = Effect.repeatN(Effect.yieldNow(), 20)
