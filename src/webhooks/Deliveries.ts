import { createHash } from "node:crypto"
import { Clock, Data, Effect, Layer, Option, PubSub, Queue } from "effect"
import { Environments } from "../environments/Environments.js"
import { hostOf, type StoredDelivery, toDeliveryView } from "./Delivery.js"
import { DeliveryMetrics } from "./DeliveryMetrics.js"
import { Outbox } from "./Outbox.js"
import { OutboxStore } from "./OutboxStore.js"
import type { SessionEndedEvent } from "./SessionEndedEvent.js"

export class DeliveryNotFound extends Data.TaggedError("DeliveryNotFound")<{ readonly deliveryId: string }> {}

/** A retry that cannot be queued: the delivery is still pending, or there is nowhere to send it. */
export class DeliveryNotRetryable extends Data.TaggedError("DeliveryNotRetryable")<{
  readonly deliveryId: string
  readonly why: string
}> {}

export const CANCEL_REASONS = {
  webhookRemoved: "webhook removed",
  environmentDeleted: "environment deleted"
} as const

/**
 * One session has one session.ended, so its delivery id is derived from the session id: the same
 * event offered again (a session ended twice, a replayed spool) finds it already queued
 * (docs/reliability.md, "Guarantees (on Redis)").
 */
export const sessionEndedDeliveryId = (sessionId: string) =>
  `dlv_${createHash("sha256").update(`session.ended ${sessionId}`).digest("base64url").slice(0, 20)}`

/**
 * The outbox's domain: accepting events (the `Outbox` port), the delivery log and manual retries
 * (/v1), and cancelling an environment's pending deliveries when its webhook goes away. Attempts
 * are made by DeliveryWorker, which `wakeups` tells about new work for a destination host.
 */
export class Deliveries extends Effect.Service<Deliveries>()("callgate/Deliveries", {
  scoped: Effect.gen(function* () {
    const store = yield* OutboxStore
    const envs = yield* Environments
    const metrics = yield* DeliveryMetrics
    const wakeups = yield* Queue.sliding<string>(1024)
    /** Every event accepted by `enqueue`, queued for a webhook or not (live views, tests). */
    const accepted = yield* PubSub.unbounded<SessionEndedEvent>()

    const enqueue = Effect.fn("Deliveries.enqueue")(function* (event: SessionEndedEvent) {
      const env = yield* envs.resolve(event.agentId, event.environmentId).pipe(
        Effect.map(Option.some),
        Effect.catchTag("EnvironmentNotFound", () => Effect.succeed(Option.none()))
      )
      const url = Option.flatMap(env, (e) => Option.fromNullable(e.stored.webhookUrl))
      if (Option.isNone(url)) {
        yield* Effect.logDebug("session.ended not queued: the environment has no webhook", { sessionId: event.sessionId })
        yield* PubSub.publish(accepted, event)
        return
      }
      const now = yield* Clock.currentTimeMillis
      const delivery: StoredDelivery = {
        id: sessionEndedDeliveryId(event.sessionId),
        event: "session.ended",
        agentId: event.agentId,
        environmentId: event.environmentId,
        sessionId: event.sessionId,
        body: JSON.stringify(event),
        url: url.value,
        state: "pending",
        createdAt: now,
        updatedAt: now,
        nextAttemptAt: now,
        retriesUsed: 0,
        automaticRetries: true,
        reason: null,
        attempts: []
      }
      yield* store.insert(delivery)
      yield* Queue.offer(wakeups, hostOf(delivery.url))
      yield* PubSub.publish(accepted, event)
    })

    const cancelForEnvironment = (agentId: string, environmentId: string, reason: string) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const cancelled = yield* store.cancelPending(agentId, environmentId, reason, now)
        metrics.settled("cancelled", cancelled.length)
        if (cancelled.length > 0) yield* Effect.logInfo("webhook deliveries cancelled", { agentId, environmentId, reason, count: cancelled.length })
      })

    // Subscribed before the layer is up, so no change published after start-up is missed.
    const changes = yield* PubSub.subscribe(envs.changes)
    yield* Queue.take(changes).pipe(
      Effect.flatMap((change) =>
        change._tag === "Deleted"
          ? cancelForEnvironment(change.agentId, change.environmentId, CANCEL_REASONS.environmentDeleted)
          : change.webhookRemoved
            ? cancelForEnvironment(change.agentId, change.environmentId, CANCEL_REASONS.webhookRemoved)
            : Effect.void
      ),
      Effect.catchAllCause((cause) => Effect.logWarning("cancelling webhook deliveries failed; attempts will cancel them", cause)),
      Effect.forever,
      Effect.forkScoped
    )

    const list = Effect.fn("Deliveries.list")(function* (
      agentId: string,
      environmentId: string,
      page: { readonly limit: number; readonly cursor?: string | undefined }
    ) {
      yield* envs.resolve(agentId, environmentId)
      const result = yield* store.list(agentId, environmentId, {
        limit: page.limit,
        before: page.cursor === undefined ? undefined : Number(page.cursor)
      })
      return {
        deliveries: result.deliveries.map(toDeliveryView),
        nextCursor: Option.match(result.next, { onNone: () => null, onSome: String })
      }
    })

    /** Queues one new attempt now; a manual retry gets no automatic retries after it. */
    const retry = Effect.fn("Deliveries.retry")(function* (agentId: string, environmentId: string, deliveryId: string) {
      const env = yield* envs.resolve(agentId, environmentId)
      const exists = yield* store.get(agentId, environmentId, deliveryId)
      if (Option.isNone(exists)) return yield* Effect.fail(new DeliveryNotFound({ deliveryId }))
      if (env.stored.webhookUrl === null) {
        return yield* Effect.fail(new DeliveryNotRetryable({ deliveryId, why: "the environment has no webhook URL" }))
      }
      const now = yield* Clock.currentTimeMillis
      const result = yield* store.requeue(agentId, environmentId, deliveryId, (d) => ({
        ...d,
        state: "pending",
        updatedAt: now,
        nextAttemptAt: now,
        automaticRetries: false,
        reason: null
      }))
      switch (result._tag) {
        case "NotFound":
          return yield* Effect.fail(new DeliveryNotFound({ deliveryId }))
        case "AlreadyPending":
          return yield* Effect.fail(new DeliveryNotRetryable({ deliveryId, why: "it is already pending or in flight" }))
        case "Requeued":
          yield* Queue.offer(wakeups, hostOf(result.delivery.url))
          return toDeliveryView(result.delivery)
      }
    })

    return {
      enqueue,
      list,
      retry,
      cancelForEnvironment,
      wakeups: wakeups as Queue.Dequeue<string>,
      /** Subscribes to the events `enqueue` accepts from now on (in the caller's scope). */
      acceptedEvents: PubSub.subscribe(accepted)
    } as const
  })
}) {}

/** The `Outbox` port, as the session code sees it. */
export const OutboxLive = Layer.effect(
  Outbox,
  Effect.map(Deliveries, (deliveries) =>
    Outbox.of({ enqueue: (event) => deliveries.enqueue(event) })
  )
)
