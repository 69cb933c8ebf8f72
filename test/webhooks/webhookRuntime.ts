import { Effect, Layer, Logger, ManagedRuntime } from "effect"
import { AppConfig } from "../../src/config/AppConfig.js"
import { Environments } from "../../src/environments/Environments.js"
import { Metrics } from "../../src/observability/Metrics.js"
import { SecretBox } from "../../src/secrets/SecretBox.js"
import { Deliveries } from "../../src/webhooks/Deliveries.js"
import type { DeliveryView } from "../../src/webhooks/Delivery.js"
import { deliveryWorkerLayer, type DeliveryWorkerOptions } from "../../src/webhooks/DeliveryWorker.js"
import { Outbox } from "../../src/webhooks/Outbox.js"
import type { OutboxStore } from "../../src/webhooks/OutboxStore.js"
import type { ApiKeyStore } from "../../src/apikeys/ApiKeyStore.js"
import type { EnvironmentStore } from "../../src/environments/EnvironmentStore.js"
import { redisOutboxStoreLayer } from "../../src/store/RedisOutboxStore.js"
import { RedisApiKeyStoreLive } from "../../src/store/RedisApiKeyStore.js"
import { RedisConnectionLive } from "../../src/store/RedisConnection.js"
import { RedisEnvironmentStoreLive } from "../../src/store/RedisEnvironmentStore.js"
import type { SessionEndedEvent } from "../../src/webhooks/SessionEndedEvent.js"
import { configFor, type StoreKind, storesLayer, testConfigLayer, uniqueId, webhooksLayer } from "../support/testApp.js"
import { CA_FILE, eventually } from "./httpsReceiver.js"

/** Settings for delivery tests: loopback receivers with the test CA, short timeout and retries. */
export const testWebhookSettings = {
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
  WEBHOOK_CA_FILE: CA_FILE,
  WEBHOOK_TIMEOUT: "400ms",
  WEBHOOK_RETRY_SCHEDULE: "100ms,100ms"
}

const defaultWorker: DeliveryWorkerOptions = { pollInterval: "100 millis", leaseMargin: "1 second" }

/**
 * Environments, the outbox over the chosen store, and (unless `worker: false`) a delivery worker.
 * Redis outboxes get their own queue (`queue`, or a fresh one) in the shared Redis.
 */
export const webhookLayer = (
  kind: StoreKind,
  env: Record<string, string> = {},
  worker: DeliveryWorkerOptions | false = defaultWorker,
  queue: string = uniqueId("outbox")
) => {
  const stores: Layer.Layer<EnvironmentStore | ApiKeyStore | OutboxStore, unknown, AppConfig> =
    kind === "redis"
      ? Layer.mergeAll(RedisEnvironmentStoreLive, RedisApiKeyStoreLive, redisOutboxStoreLayer(queue)).pipe(Layer.provideMerge(RedisConnectionLive))
      : storesLayer(kind)
  const base = webhooksLayer.pipe(
    Layer.provideMerge(Layer.mergeAll(Environments.Default, Metrics.Default)),
    Layer.provideMerge(SecretBox.Default),
    Layer.provideMerge(stores),
    Layer.provideMerge(AppConfig.Default)
  )
  const withWorker = worker === false ? base : deliveryWorkerLayer(worker).pipe(Layer.provideMerge(base))
  return withWorker.pipe(
    Layer.provide(Logger.remove(Logger.defaultLogger)),
    Layer.provide(testConfigLayer(configFor(kind, { ...testWebhookSettings, ...env })))
  )
}

export const makeWebhookRuntime = (
  kind: StoreKind,
  env: Record<string, string> = {},
  worker?: DeliveryWorkerOptions | false,
  queue?: string
) => {
  const runtime = ManagedRuntime.make(webhookLayer(kind, env, worker, queue))
  const run = <A, E>(effect: Effect.Effect<A, E, Layer.Layer.Success<ReturnType<typeof webhookLayer>>>) => runtime.runPromise(effect)

  /** A new environment whose webhook points at `url`; returns its ids and the generated secret. */
  const createEnvironment = async (url: string | null) => {
    const agentId = uniqueId("agent")
    const view = await run(Effect.flatMap(Environments, (envs) => envs.create(agentId, { name: "webhook test", webhookUrl: url })))
    return { agentId, environmentId: view.id, secret: view.webhookSecret }
  }

  const sessionEnded = (ids: { agentId: string; environmentId: string }, overrides: Partial<SessionEndedEvent> = {}): SessionEndedEvent => ({
    event: "session.ended",
    sessionId: uniqueId("ses"),
    agentId: ids.agentId,
    environmentId: ids.environmentId,
    status: "completed",
    createdAt: new Date().toISOString(),
    agentPhoneNumber: "+14155550100",
    clientPhoneNumber: "+14155550199",
    duration: "42",
    direction: "inbound",
    ...overrides
  })

  const enqueue = (event: SessionEndedEvent) => run(Effect.flatMap(Outbox, (outbox) => outbox.enqueue(event)))

  const list = (ids: { agentId: string; environmentId: string }, limit = 100) =>
    run(Effect.flatMap(Deliveries, (d) => d.list(ids.agentId, ids.environmentId, { limit }))).then((page) => page.deliveries)

  /** Waits until the environment has `count` deliveries and none is pending. */
  const settled = (ids: { agentId: string; environmentId: string }, count = 1, timeoutMs = 10_000): Promise<ReadonlyArray<DeliveryView>> =>
    eventually(async () => {
      const found = await list(ids, Math.max(100, count))
      return found.length >= count && found.every((d) => d.state !== "pending") ? found : undefined
    }, timeoutMs)

  return { runtime, run, createEnvironment, sessionEnded, enqueue, list, settled, close: () => runtime.dispose() }
}
