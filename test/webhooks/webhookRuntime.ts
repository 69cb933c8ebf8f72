import type { CreateEnvironmentBody } from "../../src/environments/EnvironmentSchema.js"
import { Effect, Layer, ManagedRuntime } from "effect"
import { Environments } from "../../src/environments/Environments.js"
import { DomainLive, FoundationLive } from "../../src/layers.js"
import { Deliveries } from "../../src/webhooks/Deliveries.js"
import type { DeliveryView } from "../../src/webhooks/Delivery.js"
import { deliveryWorkerLayer, type DeliveryWorkerOptions } from "../../src/webhooks/DeliveryWorker.js"
import { Outbox } from "../../src/webhooks/Outbox.js"
import type { SessionEndedEvent } from "../../src/webhooks/SessionEndedEvent.js"
import { type StoreKind, uniqueId, withTestConfig } from "../support/testApp.js"
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
 * Environments and the outbox over the chosen store, as production builds them (src/layers.ts),
 * and (unless `worker: false`) a delivery worker. A Redis-backed runtime works under its own
 * REDIS_KEY_PREFIX (`prefix`, or a fresh one), so its outbox is its own in the shared Redis.
 */
export const webhookLayer = (kind: StoreKind, env: Record<string, string> = {}, worker: DeliveryWorkerOptions | false = defaultWorker, prefix?: string) => {
  const base = DomainLive.pipe(Layer.provideMerge(FoundationLive))
  const withWorker = worker === false ? base : deliveryWorkerLayer(worker).pipe(Layer.provideMerge(base))
  return withTestConfig(withWorker, kind, { ...testWebhookSettings, ...(prefix === undefined ? {} : { REDIS_KEY_PREFIX: prefix }), ...env })
}

export const makeWebhookRuntime = (
  kind: StoreKind,
  env: Record<string, string> = {},
  worker?: DeliveryWorkerOptions | false,
  prefix?: string
) => {
  const runtime = ManagedRuntime.make(webhookLayer(kind, env, worker, prefix))
  const run = <A, E>(effect: Effect.Effect<A, E, Layer.Layer.Success<ReturnType<typeof webhookLayer>>>) => runtime.runPromise(effect)

  /** A new environment whose webhook points at `url`; returns its ids and the generated secret. */
  const createEnvironment = async (url: string | null, fields: Omit<CreateEnvironmentBody, "name" | "webhookUrl"> = {}) => {
    const agentId = uniqueId("agent")
    const view = await run(Effect.flatMap(Environments, (envs) => envs.create(agentId, { ...fields, name: "webhook test", webhookUrl: url })))
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
