import { Breaker } from "../../src/breaker/Breaker.js"
import { BreakerMetrics } from "../../src/breaker/BreakerMetrics.js"
import { MemoryBreakerStoreLive } from "../../src/breaker/MemoryBreakerStore.js"
import { RedisBreakerStoreLive } from "../../src/store/RedisBreakerStore.js"
import { TurnTiming } from "../../src/turns/TurnTiming.js"
import { VoiceActivity } from "../../src/turns/VoiceActivity.js"
import { ConfigProvider, Layer, ManagedRuntime } from "effect"
import type { FastifyInstance } from "fastify"
import { inject } from "vitest"
import { ApiKeys } from "../../src/apikeys/ApiKeys.js"
import { AppConfig } from "../../src/config/AppConfig.js"
import { Environments } from "../../src/environments/Environments.js"
import { HttpApp } from "../../src/http/HttpApp.js"
import { Metrics } from "../../src/observability/Metrics.js"
import { SecretBox } from "../../src/secrets/SecretBox.js"
import { MemoryApiKeyStoreLive } from "../../src/apikeys/MemoryApiKeyStore.js"
import { MemoryEnvironmentStoreLive } from "../../src/environments/MemoryEnvironmentStore.js"
import { RedisApiKeyStoreLive } from "../../src/store/RedisApiKeyStore.js"
import { RedisConnectionLive } from "../../src/store/RedisConnection.js"
import { RedisEnvironmentStoreLive } from "../../src/store/RedisEnvironmentStore.js"
import type { Carriers } from "../../src/core/Carrier.js"
import { CarrierCallEvents } from "../../src/session/CarrierCallEvents.js"
import { CarriersLive } from "../../src/telephony/CarriersLive.js"
import { SessionTokens } from "../../src/telephony/SessionTokens.js"
import { TelnyxCarrier } from "../../src/telephony/TelnyxCarrier.js"
import { TwilioCarrier } from "../../src/telephony/TwilioCarrier.js"
import { Deliveries, OutboxLive } from "../../src/webhooks/Deliveries.js"
import { DeliveryMetrics } from "../../src/webhooks/DeliveryMetrics.js"
import { MemoryOutboxStoreLive } from "../../src/webhooks/MemoryOutboxStore.js"
import type { Outbox } from "../../src/webhooks/Outbox.js"
import type { OutboxStore } from "../../src/webhooks/OutboxStore.js"
import { redisOutboxStoreLayer } from "../../src/store/RedisOutboxStore.js"
import { SafeHttpClient } from "../../src/webhooks/SafeHttpClient.js"
import { AgentConnector } from "../../src/agent/AgentConnector.js"
import { AgentPool } from "../../src/agent/AgentPool.js"
import { MemorySessionStoreLive } from "../../src/session/MemorySessionStore.js"
import { RedisSessionStoreLive } from "../../src/store/RedisSessionStore.js"
import { ErrorFallbackLive } from "../../src/fallback/ErrorFallback.js"
import { FallbackMetrics } from "../../src/fallback/FallbackMetrics.js"
import { SessionLifecycle } from "../../src/session/SessionLifecycle.js"
import { SessionRegistry } from "../../src/session/SessionRegistry.js"
import { Sessions } from "../../src/session/Sessions.js"
import type { SessionStore } from "../../src/session/SessionStore.js"
import { CarrierStreams } from "../../src/telephony/streams/CarrierStreams.js"
import { Logger } from "effect"

export const ADMIN_KEY = "test-admin-key-0123456789"
export const TEST_SECRETS_KEY = Buffer.alloc(32, 7).toString("base64")
export const adminAuth = { authorization: `Bearer ${ADMIN_KEY}` }

export type StoreKind = "memory" | "redis"

export const testConfigLayer = (env: Record<string, string> = {}) =>
  Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({ ADMIN_API_KEY: ADMIN_KEY, ...env }))))

/** Unique ids keep tests that share one Redis out of each other's keys. */
let counter = 0
export const uniqueId = (prefix: string) => `${prefix}_${process.pid}_${Date.now().toString(36)}_${(counter++).toString(36)}`

export const storesLayer = (kind: StoreKind) =>
  kind === "redis"
    ? Layer.mergeAll(RedisEnvironmentStoreLive, RedisApiKeyStoreLive, redisOutboxStoreLayer(uniqueId("outbox")), RedisSessionStoreLive).pipe(
        Layer.provideMerge(RedisConnectionLive)
      )
    : Layer.mergeAll(MemoryEnvironmentStoreLive, MemoryApiKeyStoreLive, MemoryOutboxStoreLive, MemorySessionStoreLive)

export const configFor = (kind: StoreKind, env: Record<string, string> = {}) =>
  kind === "redis" ? { REDIS_URL: inject("redisUrl"), SECRETS_KEY: TEST_SECRETS_KEY, ...env } : env

/** Carrier REST (through the SDKs, at TWILIO_/TELNYX_API_BASE_URL) and the telephony seams. */
export const telephonyLayer = CarriersLive.pipe(
  Layer.provideMerge(Layer.mergeAll(TwilioCarrier.Default, TelnyxCarrier.Default, SessionTokens.Default, CarrierCallEvents.Default))
)

/** The webhook outbox (no delivery worker: tests that deliver add `deliveryWorkerLayer`). */
export const webhooksLayer = Layer.mergeAll(OutboxLive, SafeHttpClient.Default).pipe(
  Layer.provideMerge(Deliveries.Default),
  Layer.provideMerge(DeliveryMetrics.Default)
)

/** The domain services over the chosen store, with logs silenced. */
export const domainLayer = (kind: StoreKind, env: Record<string, string> = {}) =>
  telephonyLayer.pipe(
    Layer.provideMerge(webhooksLayer),
    Layer.provideMerge(Layer.mergeAll(Environments.Default, ApiKeys.Default, Metrics.Default)),
    Layer.provideMerge(SecretBox.Default),
    Layer.provideMerge(storesLayer(kind)),
    Layer.provideMerge(AppConfig.Default),
    Layer.provide(Logger.remove(Logger.defaultLogger)),
    Layer.provide(testConfigLayer(configFor(kind, env)))
  )

/** Turn timing and the no-response breaker, on the chosen store, as main.ts assembles them. */
export const turnsLayer = (kind: StoreKind) =>
  TurnTiming.Default.pipe(
    Layer.provideMerge(Layer.mergeAll(VoiceActivity.Default, Breaker.Default)),
    Layer.provideMerge(Layer.mergeAll(BreakerMetrics.Default, kind === "redis" ? RedisBreakerStoreLive.pipe(Layer.provide(RedisConnectionLive)) : MemoryBreakerStoreLive))
  )

/** Live calls (media streams, agent connections, relay, sessions) as main.ts assembles them. */
export const callsLayer = CarrierStreams.Default.pipe(
  Layer.provideMerge(SessionRegistry.Default),
  Layer.provideMerge(Layer.mergeAll(SessionLifecycle.Default, AgentConnector.Default)),
  Layer.provideMerge(Layer.mergeAll(Sessions.Default, AgentPool.Default, ErrorFallbackLive)),
  Layer.provideMerge(FallbackMetrics.Default)
)

export interface TestApp {
  readonly app: FastifyInstance
  readonly runtime: ManagedRuntime.ManagedRuntime<
    | HttpApp
    | Environments
    | ApiKeys
    | Metrics
    | AppConfig
    | SecretBox
    | Carriers
    | TwilioCarrier
    | TelnyxCarrier
    | SessionTokens
    | CarrierCallEvents
    | Deliveries
    | DeliveryMetrics
    | Outbox
    | OutboxStore
    | SafeHttpClient
    | CarrierStreams
    | SessionRegistry
    | Sessions
    | SessionStore
    | AgentPool,
    unknown
  >
  readonly close: () => Promise<void>
}

/** Builds the HTTP app (not listening) over the chosen store; `close` releases everything. */
export const makeTestApp = async (kind: StoreKind = "memory", env: Record<string, string> = {}): Promise<TestApp> => {
  const runtime = ManagedRuntime.make(HttpApp.Default.pipe(Layer.provideMerge(callsLayer), Layer.provideMerge(domainLayer(kind, env))))
  const { app } = await runtime.runPromise(HttpApp)
  return { app, runtime, close: () => runtime.dispose() }
}
