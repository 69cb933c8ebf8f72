import { Effect, Layer, Option } from "effect"
import { AgentConnector } from "./agent/AgentConnector.js"
import { AgentPool } from "./agent/AgentPool.js"
import { ApiKeys } from "./apikeys/ApiKeys.js"
import { AuthThrottle } from "./apikeys/AuthThrottle.js"
import { MemoryApiKeyStoreLive } from "./apikeys/MemoryApiKeyStore.js"
import { Breaker } from "./breaker/Breaker.js"
import { BreakerMetrics } from "./breaker/BreakerMetrics.js"
import { MemoryBreakerStoreLive } from "./breaker/MemoryBreakerStore.js"
import { AppConfig } from "./config/AppConfig.js"
import { PublicUrl } from "./config/PublicUrl.js"
import { InstanceIdentity } from "./config/InstanceIdentity.js"
import { Environments } from "./environments/Environments.js"
import { MemoryEnvironmentStoreLive } from "./environments/MemoryEnvironmentStore.js"
import { CallControl } from "./calls/CallControl.js"
import { OutboundCalls } from "./calls/OutboundCalls.js"
import { ErrorFallback } from "./fallback/ErrorFallback.js"
import { FallbackMetrics } from "./fallback/FallbackMetrics.js"
import { HttpApp } from "./http/HttpApp.js"
import { HttpServerLive } from "./http/HttpServer.js"
import { loggerLayer } from "./observability/Logging.js"
import { Metrics } from "./observability/Metrics.js"
import { tracingLayer } from "./observability/Tracing.js"
import { Recordings } from "./recording/Recordings.js"
import { SecretBox } from "./secrets/SecretBox.js"
import { CarrierCallEvents } from "./livecall/CarrierCallEvents.js"
import { MemorySessionStoreLive } from "./sessions/MemorySessionStore.js"
import { AfterStream } from "./recovery/AfterStream.js"
import { OrphanReconciler } from "./recovery/OrphanReconciler.js"
import { SessionEndJournal } from "./sessions/SessionEndJournal.js"
import { TransferOutcomes } from "./sessions/TransferOutcomes.js"
import { StartupReconciliationLive } from "./recovery/StartupReconciliation.js"
import { CallSettlement } from "./livecall/CallSettlement.js"
import { LiveCallDrain, LiveCallDrainLive } from "./livecall/LiveCallDrain.js"
import { LiveCalls } from "./livecall/LiveCalls.js"
import { Sessions } from "./sessions/Sessions.js"
import { CallTurns } from "./livecall/CallTurns.js"
import { FailoverMetrics } from "./livecall/FailoverMetrics.js"
import { CallCheckpoints } from "./livecall/CallCheckpoints.js"
import { RedisApiKeyStoreLive } from "./redis/RedisApiKeyStore.js"
import { RedisBreakerStoreLive } from "./redis/RedisBreakerStore.js"
import { RedisConnectionLive } from "./redis/RedisConnection.js"
import { RedisEnvironmentStoreLive } from "./redis/RedisEnvironmentStore.js"
import { RedisOutboxStoreLive } from "./redis/RedisOutboxStore.js"
import { RedisSessionStoreLive } from "./redis/RedisSessionStore.js"
import { RedisSessionFencingLive } from "./redis/RedisSessionFencing.js"
import { MemorySessionFencingLive } from "./kernel/MemorySessionFencing.js"
import { OwnershipLease } from "./kernel/OwnershipLease.js"
import { RedisSpentTokenStoreLive } from "./redis/RedisSpentTokenStore.js"
import { RedisInstanceStoreLive } from "./redis/RedisInstanceStore.js"
import { RedisCallLeaseStoreLive } from "./redis/RedisCallLeaseStore.js"
import { MemoryCallLeaseStoreLive } from "./sessions/MemoryCallLeaseStore.js"
import { CallLeases } from "./sessions/CallLeases.js"
import { CallMover } from "./livecall/CallMover.js"
import { CallRelocation } from "./telephony/entry/CallRelocation.js"
import { MemoryInstanceStoreLive } from "./fleet/MemoryInstanceStore.js"
import { InstanceRegistry } from "./fleet/InstanceRegistry.js"
import { LostInstancesLive } from "./fleet/LostInstances.js"
import { Placement } from "./fleet/Placement.js"
import { MemorySpentTokenStoreLive } from "./telephony/MemorySpentTokenStore.js"
import { CarriersLive } from "./carriers/CarriersLive.js"
import { EntryBackgroundWork } from "./telephony/entry/EntryBackgroundWork.js"
import { SessionTokens } from "./telephony/SessionTokens.js"
import { CarrierStreams } from "./telephony/streams/CarrierStreams.js"
import { TelnyxCallCommands } from "./carriers/TelnyxCallCommands.js"
import { TelnyxCarrier } from "./carriers/TelnyxCarrier.js"
import { TelnyxRest } from "./carriers/TelnyxRest.js"
import { TelnyxTwimlRunner } from "./carriers/TelnyxTwimlRunner.js"
import { TwilioCarrier } from "./carriers/TwilioCarrier.js"
import { TurnTiming } from "./turns/TurnTiming.js"
import { VoiceActivity } from "./turns/VoiceActivity.js"
import { Deliveries, OutboxLive } from "./webhooks/Deliveries.js"
import { DeliveryMetrics } from "./webhooks/DeliveryMetrics.js"
import { DeliveryWorkerLive } from "./webhooks/DeliveryWorker.js"
import { MemoryOutboxStoreLive } from "./webhooks/MemoryOutboxStore.js"
import { SafeHttpClient } from "./webhooks/SafeHttpClient.js"
import { SocketGuards } from "./websocket/SocketGuards.js"
import { WsAgentDialerLive } from "./websocket/WsAgentDialer.js"

/**
 * The one production layer graph (docs/design.md, "One wiring"). `src/main.ts` launches `appLayer`;
 * the tests, the bench and the demo build the same graph and replace only what must differ
 * (configuration through a ConfigProvider, the Clock), never a service.
 *
 * REDIS_URL picks the stores: Redis when set (shared by every instance), the embedded in-memory
 * store when not (one instance, nothing survives a restart).
 */
const whenRedis = <A, E, R, E2, R2>(redis: Layer.Layer<A, E, R>, memory: Layer.Layer<A, E2, R2>) =>
  Layer.unwrapEffect(
    Effect.map(AppConfig, (config): Layer.Layer<A, E | E2, R | R2> => (Option.isSome(config.redisUrl) ? redis : memory))
  )

/**
 * Environments, API keys, the outbox, sessions, spent session tokens and the fleet's instance
 * registry: Redis adapters over one connection, or memory.
 */
const StoresLive = whenRedis(
  Layer.mergeAll(
    RedisEnvironmentStoreLive,
    RedisApiKeyStoreLive,
    RedisOutboxStoreLive,
    RedisSessionStoreLive,
    RedisSessionFencingLive,
    RedisSpentTokenStoreLive,
    RedisInstanceStoreLive,
    RedisCallLeaseStoreLive
  ).pipe(Layer.provide(RedisConnectionLive)),
  Layer.mergeAll(
    MemoryEnvironmentStoreLive,
    MemoryApiKeyStoreLive,
    MemoryOutboxStoreLive,
    MemorySessionStoreLive,
    MemorySessionFencingLive,
    MemorySpentTokenStoreLive,
    MemoryInstanceStoreLive,
    MemoryCallLeaseStoreLive
  )
)

/** The no-response breaker's occurrence window and trip channel: shared through Redis, or this process's memory. */
const BreakerStoreLive = whenRedis(RedisBreakerStoreLive.pipe(Layer.provide(RedisConnectionLive)), MemoryBreakerStoreLive)

/** Log lines at LOG_LEVEL in callgate's format (observability/Logging.ts), for everything built under it. */
export const LoggingLive = Layer.unwrapEffect(Effect.map(AppConfig, (config) => loggerLayer(config.logLevel))).pipe(
  Layer.provide(AppConfig.Default)
)

/**
 * Traces as the standard OTEL_* variables say (observability/Tracing.ts): exported over OTLP/HTTP when
 * an endpoint is set, ids only (for logs and `traceparent`) when not.
 */
export const TracingLive = tracingLayer

/** Configuration, logs, metrics, secrets at rest and the stores. */
export const FoundationLive = Layer.mergeAll(SecretBox.Default, StoresLive, Metrics.Default, PublicUrl.Default, InstanceIdentity.Default, OwnershipLease.Default).pipe(
  Layer.provideMerge(AppConfig.Default)
)

/** Environments, API keys and event webhooks (the outbox, the delivery log, the SSRF-safe client). */
export const DomainLive = Layer.mergeAll(OutboxLive, SafeHttpClient.Default).pipe(
  Layer.provideMerge(Deliveries.Default),
  Layer.provideMerge(DeliveryMetrics.Default),
  Layer.provideMerge(Layer.mergeAll(Environments.Default, ApiKeys.Default, AuthThrottle.Default))
)

/**
 * Carrier REST through the SDKs (the `Carriers` port and the adapters behind it), session tokens, and
 * the background work carrier webhooks start (Call Control commands, after-stream rescues).
 */
export const TelephonyLive = CarriersLive.pipe(
  Layer.provideMerge(Layer.mergeAll(TwilioCarrier.Default, TelnyxCarrier.Default, SessionTokens.Default, EntryBackgroundWork.Default)),
  Layer.provideMerge(Layer.mergeAll(TelnyxCallCommands.Default, TelnyxTwimlRunner.Default)),
  Layer.provideMerge(TelnyxRest.Default)
)

/**
 * Turn timing and the breaker over a breaker store of the caller's choosing: production's is
 * BreakerStoreLive (TurnsLive); tests that watch or fail the store's calls wrap the real adapter.
 */
export const turnsOver = <E, R>(store: Layer.Layer<Layer.Layer.Success<typeof BreakerStoreLive>, E, R>) =>
  TurnTiming.Default.pipe(
    Layer.provideMerge(VoiceActivity.Default),
    Layer.provideMerge(Breaker.Default.pipe(Layer.provideMerge(BreakerMetrics.Default))),
    Layer.provideMerge(store)
  )

/** Turn timing per call (voice activity, turn tracker, response watchdog) and the breaker behind it. */
export const TurnsLive = turnsOver(BreakerStoreLive)

/**
 * This instance in the fleet (docs/scaling.md): its entry in the instance registry, refreshed in
 * the background with its idle dial-in agents, placement at the call entry, and the fleet-wide
 * call limits' leases.
 */
const FleetLive = Layer.mergeAll(Placement.Default, CallLeases.Default).pipe(Layer.provideMerge(InstanceRegistry.Default))

/** The error fallback (a transfer, or the signed webhook whose TwiML takes the call over) and its metrics. */
export const RescueLive = ErrorFallback.Default.pipe(Layer.provideMerge(FallbackMetrics.Default))

/**
 * Live calls: carrier media streams, agent connections (dial-in pool, dial-out), each call owned
 * by its LiveCall (relay, turn watch, trip subscription, single ending); a hard error or a
 * breaker trip runs the error fallback from there.
 */
const CallsLive = Layer.mergeAll(CarrierStreams.Default, CallRelocation.Default).pipe(
  Layer.provideMerge(Layer.mergeAll(FleetLive, LiveCallDrain.Default)),
  Layer.provideMerge(Layer.mergeAll(LiveCalls.Default, AfterStream.Default)),
  Layer.provideMerge(Layer.mergeAll(CallSettlement.Default, CallTurns.Default, CallCheckpoints.Default, OrphanReconciler.Default, CarrierCallEvents.Default, AgentConnector.Default, FailoverMetrics.Default, CallMover.Default)),
  Layer.provideMerge(Layer.mergeAll(SessionEndJournal.Default, TransferOutcomes.Default)),
  Layer.provideMerge(Layer.mergeAll(Sessions.Default, AgentPool.Default, RescueLive, WsAgentDialerLive)),
  Layer.provideMerge(Layer.mergeAll(SocketGuards.Default, Recordings.Default))
)

/** What agents and operators do to calls: outbound calls and the Twilio-compatible call-control API. */
const CallApiLive = CallControl.Default.pipe(Layer.provideMerge(OutboundCalls.Default))

/**
 * Every service of the gateway, the HTTP app included (built, not listening), over configuration
 * from the ambient ConfigProvider. Nothing here listens or works in the background but live calls.
 */
export const appServicesLayer = HttpApp.Default.pipe(
  Layer.provideMerge(CallApiLive),
  Layer.provideMerge(CallsLive),
  Layer.provideMerge(TurnsLive),
  Layer.provideMerge(TelephonyLive),
  Layer.provideMerge(DomainLive),
  Layer.provideMerge(FoundationLive),
  Layer.provide(Layer.merge(LoggingLive, TracingLive))
)

/**
 * What runs beside the services: the server on HOST:PORT, the webhook delivery worker, the drain
 * of live calls at shutdown, and the reconciliation of the previous run's sessions at start.
 */
const backgroundLayer = Layer.mergeAll(HttpServerLive, DeliveryWorkerLive, LiveCallDrainLive, StartupReconciliationLive, LostInstancesLive)

/**
 * The gateway. LiveCallDrainLive sits beside the server so live calls drain before the HTTP app
 * closes its sockets.
 */
export const appLayer = backgroundLayer.pipe(Layer.provideMerge(appServicesLayer))
