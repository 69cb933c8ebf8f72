import { Cause, ConfigError, Effect, Exit, Fiber, Layer, Option } from "effect"
import { ApiKeys } from "./apikeys/ApiKeys.js"
import { Breaker } from "./breaker/Breaker.js"
import { BreakerMetrics } from "./breaker/BreakerMetrics.js"
import { MemoryBreakerStoreLive } from "./breaker/MemoryBreakerStore.js"
import { RedisBreakerStoreLive } from "./store/RedisBreakerStore.js"
import { AppConfig, describeConfigError } from "./config/AppConfig.js"
import { Environments } from "./environments/Environments.js"
import { ErrorFallbackLive } from "./fallback/ErrorFallback.js"
import { FallbackMetrics } from "./fallback/FallbackMetrics.js"
import { HttpApp } from "./http/HttpApp.js"
import { HttpServerLive } from "./http/HttpServer.js"
import { loggerLayer } from "./observability/Logging.js"
import { Metrics } from "./observability/Metrics.js"
import { SecretBox } from "./secrets/SecretBox.js"
import { MemoryApiKeyStoreLive } from "./apikeys/MemoryApiKeyStore.js"
import { MemoryEnvironmentStoreLive } from "./environments/MemoryEnvironmentStore.js"
import { RedisApiKeyStoreLive } from "./store/RedisApiKeyStore.js"
import { RedisConnectionLive } from "./store/RedisConnection.js"
import { RedisEnvironmentStoreLive } from "./store/RedisEnvironmentStore.js"
import { CarrierCallEvents } from "./session/CarrierCallEvents.js"
import { CarriersLive } from "./telephony/CarriersLive.js"
import { SessionTokens } from "./telephony/SessionTokens.js"
import { TelnyxCarrier } from "./telephony/TelnyxCarrier.js"
import { TwilioCarrier } from "./telephony/TwilioCarrier.js"
import { Deliveries, OutboxLive } from "./webhooks/Deliveries.js"
import { DeliveryMetrics } from "./webhooks/DeliveryMetrics.js"
import { DeliveryWorkerLive } from "./webhooks/DeliveryWorker.js"
import { MemoryOutboxStoreLive } from "./webhooks/MemoryOutboxStore.js"
import { RedisOutboxStoreLive } from "./store/RedisOutboxStore.js"
import { SessionTurnObserversLive } from "./session/SessionTurnObservers.js"
import { TurnTiming } from "./turns/TurnTiming.js"
import { VoiceActivity } from "./turns/VoiceActivity.js"
import { SafeHttpClient } from "./webhooks/SafeHttpClient.js"
import { AgentConnector } from "./agent/AgentConnector.js"
import { AgentPool } from "./agent/AgentPool.js"
import { MemorySessionStoreLive } from "./session/MemorySessionStore.js"
import { RedisSessionStoreLive } from "./store/RedisSessionStore.js"
import { SessionDrainLive, SessionRegistry } from "./session/SessionRegistry.js"
import { SessionLifecycle } from "./session/SessionLifecycle.js"
import { Sessions } from "./session/Sessions.js"
import { CarrierStreams } from "./telephony/streams/CarrierStreams.js"

/**
 * The one place layers are assembled. REDIS_URL picks the stores: Redis when set (shared by every
 * instance), the embedded in-memory store when not (one instance, nothing survives a restart).
 */
const StoresLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) =>
    Option.isSome(config.redisUrl)
      ? Layer.mergeAll(RedisEnvironmentStoreLive, RedisApiKeyStoreLive, RedisOutboxStoreLive, RedisSessionStoreLive).pipe(
          Layer.provide(RedisConnectionLive)
        )
      : Layer.mergeAll(MemoryEnvironmentStoreLive, MemoryApiKeyStoreLive, MemoryOutboxStoreLive, MemorySessionStoreLive)
  )
)

/** The no-response breaker's occurrence window and trip channel: shared through Redis, or this process's memory. */
const BreakerStoreLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) =>
    Option.isSome(config.redisUrl) ? RedisBreakerStoreLive.pipe(Layer.provide(RedisConnectionLive)) : MemoryBreakerStoreLive
  )
)

/** Turn timing per call (voice activity detection, turn tracker, response watchdog) and the breaker behind it. */
const TurnsLive = TurnTiming.Default.pipe(
  Layer.provideMerge(Layer.mergeAll(VoiceActivity.Default, Breaker.Default)),
  Layer.provideMerge(Layer.mergeAll(BreakerMetrics.Default, BreakerStoreLive))
)

const LoggerLive = Layer.unwrapEffect(Effect.map(AppConfig, (config) => loggerLayer(config.logLevel)))

/** Event webhooks: the outbox (the `Outbox` port, delivery log) and the SSRF-safe client both webhook kinds use. */
const WebhooksLive = Layer.mergeAll(OutboxLive, SafeHttpClient.Default).pipe(
  Layer.provideMerge(Deliveries.Default),
  Layer.provideMerge(DeliveryMetrics.Default)
)

const DomainLive = WebhooksLive.pipe(
  Layer.provideMerge(Layer.mergeAll(Environments.Default, ApiKeys.Default)),
  Layer.provideMerge(SecretBox.Default),
  Layer.provideMerge(StoresLive)
)

/** Carrier REST through the SDKs (the `Carriers` port and the adapters behind it), and the telephony seams. */
const TelephonyLive = CarriersLive.pipe(
  Layer.provideMerge(Layer.mergeAll(TwilioCarrier.Default, TelnyxCarrier.Default, SessionTokens.Default, CarrierCallEvents.Default))
)

/**
 * Live calls: carrier media streams, agent connections (dial-in pool, dial-out), the relay and its
 * sessions, each timed turn by turn. Rescue: a hard error or a breaker trip runs the environment's
 * error fallback.
 */
const CallsLive = CarrierStreams.Default.pipe(
  Layer.provideMerge(SessionRegistry.Default),
  Layer.provideMerge(Layer.mergeAll(SessionLifecycle.Default, AgentConnector.Default)),
  Layer.provideMerge(SessionTurnObserversLive),
  Layer.provideMerge(Layer.mergeAll(Sessions.Default, AgentPool.Default, ErrorFallbackLive)),
  Layer.provideMerge(FallbackMetrics.Default)
)

// SessionDrainLive sits beside the server so live calls drain before the HTTP app closes its sockets.
export const MainLive = Layer.mergeAll(HttpServerLive, DeliveryWorkerLive, SessionDrainLive).pipe(
  Layer.provide(HttpApp.Default),
  Layer.provide(CallsLive),
  Layer.provide(TurnsLive),
  Layer.provide(DomainLive),
  Layer.provide(TelephonyLive),
  Layer.provide(Metrics.Default),
  Layer.provide(LoggerLive),
  Layer.provide(AppConfig.Default)
)

/**
 * Runs the app until SIGINT/SIGTERM, then interrupts it so every scoped resource (HTTP server,
 * live calls, Redis) closes in reverse order of acquisition. Bad configuration is one line on
 * stderr and exit code 1.
 */
const runMain = <E>(program: Effect.Effect<never, E>) => {
  const fiber = Effect.runFork(program)
  const stop = () => Effect.runFork(Fiber.interrupt(fiber))
  process.once("SIGINT", stop)
  process.once("SIGTERM", stop)
  fiber.addObserver((exit) => {
    if (Exit.isSuccess(exit) || Cause.isInterruptedOnly(exit.cause)) process.exit(0)
    const failure = Cause.failureOption(exit.cause)
    if (Option.isSome(failure) && ConfigError.isConfigError(failure.value)) {
      process.stderr.write(`callgate: ${describeConfigError(failure.value)}\n`)
    } else {
      process.stderr.write(`callgate: failed to start: ${Cause.pretty(exit.cause)}\n`)
    }
    process.exit(1)
  })
}

runMain(Layer.launch(MainLive))
