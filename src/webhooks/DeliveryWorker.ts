import { traceparentHeader, withCallSpan } from "../observability/Tracing.js"
import { Clock, Duration, Effect, Either, FiberSet, Layer, Option, Queue, Random, Schedule } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { DEFAULT_WEBHOOK_SIGNATURE_SCHEME } from "../environments/EnvironmentSchema.js"
import { isStoreUnreachable } from "../kernel/StoreError.js"
import { Environments } from "../environments/Environments.js"
import { hostOf, MAX_RECORDED_ATTEMPTS, type StoredAttempt, type StoredDelivery } from "./Delivery.js"
import { CANCEL_REASONS, Deliveries } from "./Deliveries.js"
import { type AttemptResult, DeliveryMetrics } from "./DeliveryMetrics.js"
import { type Claim, OutboxStore } from "./OutboxStore.js"
import { type SafeHttpError, SafeHttpClient, type SafeResponse } from "./SafeHttpClient.js"
import { ATTEMPT_HEADER, DELIVERY_ID_HEADER } from "./Signing.js"
import { eventSignatureHeaders } from "./StandardSigning.js"

export interface DeliveryWorkerOptions {
  /** How often to look for work enqueued elsewhere (other instances, retries coming due). Default 500 ms. */
  readonly pollInterval?: Duration.DurationInput
  /** A lease lasts WEBHOOK_TIMEOUT plus this, so it outlives any attempt. Default 15 s. */
  readonly leaseMargin?: Duration.DurationInput
}

/** Response bytes kept from an event receiver: its body is not used (docs/webhooks.md, "Attempts and retries"). */
const RESPONSE_BYTES_KEPT = 1024
/** Most deliveries taken by one claim. */
const CLAIM_BATCH = 64
/** When the store cannot be read to start an attempt, the delivery is tried again this much later. */
const STORE_TROUBLE_DELAY_MS = 1000

/** A claim this worker holds, in flight or waiting for its host. */
interface Held {
  readonly claim: Claim
  readonly leaseEnds: number
}

interface Verdict {
  readonly result: AttemptResult
  readonly statusCode: number | null
  readonly error: string | null
  /** null: delivered. */
  readonly failure: null | { readonly retryable: boolean; readonly summary: string }
}

/** What an attempt's response means (docs/webhooks.md, "Attempts and retries"). */
export const judgeAttempt = (response: Either.Either<SafeResponse, SafeHttpError>): Verdict => {
  if (Either.isRight(response)) {
    const status = response.right.status
    if (status >= 200 && status < 400) return { result: "success", statusCode: status, error: null, failure: null }
    if (status >= 400 && status < 500) {
      return { result: "client_error", statusCode: status, error: null, failure: { retryable: false, summary: `HTTP ${status}` } }
    }
    return { result: "server_error", statusCode: status, error: null, failure: { retryable: true, summary: `HTTP ${status}` } }
  }
  const error = response.left
  switch (error.kind) {
    case "timeout":
      return { result: "timeout", statusCode: null, error: error.detail, failure: { retryable: true, summary: error.detail } }
    case "connection":
      return { result: "connection_error", statusCode: null, error: error.detail, failure: { retryable: true, summary: error.detail } }
    default:
      // The URL itself is refused: repeating the attempt cannot help.
      return { result: "refused", statusCode: null, error: error.detail, failure: { retryable: false, summary: error.detail } }
  }
}

/**
 * Delivers the outbox: claims due deliveries (woken at once by local enqueues, and polling for the
 * rest), and runs each attempt in its own fiber, bounded overall (WEBHOOK_CONCURRENCY) and per
 * destination host (WEBHOOK_CONCURRENCY_PER_HOST in flight, as many again waiting). Every attempt
 * re-reads the environment, so it goes to the current URL signed with the current secret.
 */
export const makeDeliveryWorker = (options: DeliveryWorkerOptions = {}) =>
  Effect.gen(function* () {
    const store = yield* OutboxStore
    const deliveries = yield* Deliveries
    const envs = yield* Environments
    const http = yield* SafeHttpClient
    const config = yield* AppConfig
    const metrics = yield* DeliveryMetrics

    const timeout = config.webhookTimeout
    const schedule = config.webhookRetrySchedule.map(Duration.toMillis)
    const timeoutMs = Duration.toMillis(timeout)
    const marginMs = Duration.toMillis(options.leaseMargin ?? "15 seconds")
    const leaseMs = timeoutMs + marginMs
    const pollMs = Duration.toMillis(options.pollInterval ?? "500 millis")
    const maxHeld = config.webhookConcurrency
    const perHost = config.webhookConcurrencyPerHost

    // Plain mutable state: only touched inside synchronous steps on the one JS thread.
    const hosts = new Map<string, { inFlight: number; waiting: Array<Held> }>()
    let held = 0
    const signal = yield* Queue.sliding<true>(1)
    const wake = Queue.offer(signal, true)
    const fibers = yield* FiberSet.make<void, never>()
    // At shutdown, claims still waiting for their host go back to the outbox for another instance.
    // This runs after the loops below stop and before in-flight attempts are interrupted (each of
    // those releases its own claim).
    yield* Effect.addFinalizer(() =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const waiting = [...hosts.values()].flatMap((s) => s.waiting.splice(0))
        yield* Effect.forEach(waiting, ({ claim }) => Effect.ignore(store.release(claim.delivery.id, claim.lease, now)), {
          discard: true
        })
      })
    )

    const hostState = (host: string) => {
      let state = hosts.get(host)
      if (state === undefined) hosts.set(host, (state = { inFlight: 0, waiting: [] }))
      return state
    }
    const heldByHost = () => new Map([...hosts].map(([host, s]) => [host, s.inFlight + s.waiting.length] as const))

    /**
     * Records the attempt's outcome. `leaseEnds`: a store that does not answer (a Redis failover)
     * is retried until the lease ends, so a delivery that went out is not sent again for want of its
     * record (docs/scaling.md, "Redis that fails over: Sentinel and Cluster replicas").
     */
    const settle = (claim: Claim, next: StoredDelivery, leaseEnds?: number) =>
      Effect.gen(function* () {
        const finish = store.finish(claim.delivery.id, claim.lease, next)
        const written = yield* leaseEnds === undefined
          ? finish
          : finish.pipe(
              Effect.retry({
                schedule: Schedule.spaced(Duration.millis(250)),
                while: () => Effect.map(Clock.currentTimeMillis, (now) => now + 250 < leaseEnds)
              })
            )
        if (written._tag === "LeaseLost") {
          return yield* Effect.logWarning("webhook attempt finished after its lease was taken over", { deliveryId: next.id })
        }
        if (written._tag === "CancelRequested") {
          yield* store.finish(claim.delivery.id, claim.lease, { ...next, state: "cancelled", nextAttemptAt: null, reason: written.reason })
          return metrics.settled("cancelled")
        }
        if (next.state !== "pending") metrics.settled(next.state)
      })

    const cancel = (claim: Claim, reason: string) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        settle(claim, { ...claim.delivery, state: "cancelled", updatedAt: now, nextAttemptAt: null, reason })
      )

    const attempt = ({ claim, leaseEnds: claimedUntil }: Held) =>
      Effect.gen(function* () {
        const d = claim.delivery
        // A claim that waited long for its host may not have a whole attempt's time left: extend it first.
        const now = yield* Clock.currentTimeMillis
        let leaseEnds = claimedUntil
        if (leaseEnds - now < timeoutMs + marginMs / 2) {
          if (!(yield* store.renew(d.id, claim.lease, now + leaseMs))) return
          leaseEnds = now + leaseMs
        }
        const env = yield* Effect.either(envs.resolve(d.agentId, d.environmentId))
        if (Either.isLeft(env)) {
          if (env.left._tag === "EnvironmentNotFound") return yield* cancel(claim, CANCEL_REASONS.environmentDeleted)
          const now = yield* Clock.currentTimeMillis
          return yield* store.release(d.id, claim.lease, now + STORE_TROUBLE_DELAY_MS)
        }
        const url = env.right.stored.webhookUrl
        if (url === null) return yield* cancel(claim, CANCEL_REASONS.webhookRemoved)

        const number = d.attempts.length + 1
        const startedAt = yield* Clock.currentTimeMillis
        const headers = {
          "content-type": "application/json",
          "user-agent": "callgate-webhooks/1",
          [DELIVERY_ID_HEADER]: d.id,
          [ATTEMPT_HEADER]: String(number),
          // Signed now, with the secret and scheme current now: a retry hours later is still fresh.
          ...eventSignatureHeaders(
            env.right.stored.webhookSignatureScheme ?? DEFAULT_WEBHOOK_SIGNATURE_SCHEME,
            Option.getOrUndefined(env.right.webhookSecret),
            d.id,
            Math.floor(startedAt / 1000),
            d.body
          )
        }
        // The attempt is a span of the call's trace; the receiver can join it through `traceparent`.
        const response = yield* Effect.either(
          Effect.flatMap(traceparentHeader, (trace) =>
            http.post(url, { headers: { ...headers, ...trace }, body: d.body, timeout, maxResponseBytes: RESPONSE_BYTES_KEPT })
          )
        )
        const endedAt = yield* Clock.currentTimeMillis
        const verdict = judgeAttempt(response)
        metrics.attempted(verdict.result, (endedAt - startedAt) / 1000)

        let next: Pick<StoredDelivery, "state" | "nextAttemptAt" | "retriesUsed" | "reason">
        if (verdict.failure === null) {
          next = { state: "delivered", nextAttemptAt: null, retriesUsed: d.retriesUsed, reason: null }
        } else if (!verdict.failure.retryable) {
          next = { state: "failed", nextAttemptAt: null, retriesUsed: d.retriesUsed, reason: verdict.failure.summary }
        } else if (d.automaticRetries && d.retriesUsed < schedule.length) {
          const jitter = yield* Random.nextRange(0.8, 1.2)
          const delay = Math.round(schedule[d.retriesUsed]! * jitter)
          next = { state: "pending", nextAttemptAt: endedAt + delay, retriesUsed: d.retriesUsed + 1, reason: null }
        } else {
          const reason = `no successful attempt after ${number}; the last: ${verdict.failure.summary}`
          next = { state: "exhausted", nextAttemptAt: null, retriesUsed: d.retriesUsed, reason }
        }
        const record: StoredAttempt = {
          attempt: number,
          startedAt,
          durationMs: endedAt - startedAt,
          statusCode: verdict.statusCode,
          error: verdict.error,
          outcome: next.state === "pending" ? "retry" : next.state === "delivered" ? "delivered" : next.state === "failed" ? "failed" : "exhausted"
        }
        yield* Effect.annotateCurrentSpan({
          "callgate.delivery.attempt": number,
          "callgate.delivery.outcome": record.outcome,
          ...(verdict.statusCode !== null ? { "http.response.status_code": verdict.statusCode } : {}),
          ...(verdict.error !== null ? { "callgate.delivery.error": verdict.error } : {})
        })
        yield* settle(claim, {
          ...d,
          ...next,
          updatedAt: endedAt,
          attempts: [...d.attempts, record].slice(-MAX_RECORDED_ATTEMPTS)
        }, leaseEnds)
        if (next.state !== "delivered" && next.state !== "pending") {
          yield* Effect.logInfo("webhook delivery settled", { deliveryId: d.id, host: hostOf(url), state: next.state, reason: next.reason })
        }
      }).pipe(
        // Shutting down mid-attempt: hand the delivery back rather than wait for the lease to expire.
        Effect.onInterrupt(() =>
          Effect.flatMap(Clock.currentTimeMillis, (now) => store.release(claim.delivery.id, claim.lease, now)).pipe(Effect.ignore)
        ),
        Effect.catchAllCause((cause) =>
          Effect.logWarning("webhook attempt failed; its lease will expire and it will be tried again", {
            deliveryId: claim.delivery.id
          }, cause)
        ),
        Effect.annotateLogs({ sessionId: claim.delivery.sessionId, deliveryId: claim.delivery.id }),
        withCallSpan(claim.delivery.sessionId, "callgate.webhook.delivery", {
          kind: "client",
          attributes: { "callgate.session.id": claim.delivery.sessionId, "callgate.delivery.id": claim.delivery.id }
        }),
        Effect.asVoid
      )

    const start = (held: Held, host: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        hostState(host).inFlight++
        return FiberSet.run(fibers, attempt(held).pipe(Effect.ensuring(finished(host))))
      }).pipe(Effect.asVoid)

    const finished = (host: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        const state = hostState(host)
        state.inFlight--
        held--
        const next = state.waiting.shift()
        if (state.inFlight === 0 && state.waiting.length === 0 && next === undefined) hosts.delete(host)
        const refill = state.waiting.length <= perHost / 2 ? wake : Effect.void
        return next === undefined ? refill : Effect.zipRight(start(next, host), refill)
      })

    const dispatch = (claim: Claim, claimedAt: number) =>
      Effect.suspend(() => {
        const host = hostOf(claim.delivery.url)
        const state = hostState(host)
        const entry: Held = { claim, leaseEnds: claimedAt + leaseMs }
        held++
        if (state.inFlight < perHost) return start(entry, host)
        state.waiting.push(entry)
        return Effect.void
      })

    /** Claims failing in a row: logged once when they start failing and once when they work again. */
    let claimFailing = false
    let claimFailureLogged = false

    /** Claims until nothing more is due or there is no room; returns how long to sleep. */
    const fill = Effect.gen(function* () {
      for (;;) {
        const room = maxHeld - held
        if (room <= 0) return pollMs
        const now = yield* Clock.currentTimeMillis
        const limit = Math.min(room, CLAIM_BATCH)
        const batch = yield* store.claim(now, leaseMs, limit, { perHost: perHost * 2, held: heldByHost() })
        if (claimFailing) {
          claimFailing = false
          if (claimFailureLogged) yield* Effect.logInfo("claiming webhook deliveries works again")
          claimFailureLogged = false
        }
        yield* Effect.forEach(batch.claims, (claim) => dispatch(claim, now), { discard: true })
        if (batch.claims.length === limit) continue
        return Option.match(batch.nextDueAt, {
          onNone: () => pollMs,
          onSome: (at) => (at > now ? Math.min(pollMs, at - now) : pollMs)
        })
      }
    }).pipe(
      Effect.catchAllCause((cause) => {
        if (claimFailing) return Effect.succeed(pollMs)
        claimFailing = true
        // The store being unreachable is the store connection's line to log (once each way).
        if (isStoreUnreachable(cause)) return Effect.succeed(pollMs)
        claimFailureLogged = true
        return Effect.as(Effect.logWarning("claiming webhook deliveries failed; retrying quietly until it works", cause), pollMs)
      })
    )

    yield* fill.pipe(
      // timeoutOption, not timeout: waking at the end of the poll interval is the usual case, not
      // an error to build (a TimeoutException and its stack twice a second on an idle instance).
      Effect.flatMap((sleepMs) => Effect.asVoid(Effect.timeoutOption(Queue.take(signal), sleepMs))),
      Effect.forever,
      Effect.forkScoped
    )

    // A local enqueue wakes the loop at once, unless its host is already at capacity here.
    yield* Queue.take(deliveries.wakeups).pipe(
      Effect.flatMap((host) => {
        const state = hosts.get(host)
        return state !== undefined && state.inFlight + state.waiting.length >= perHost * 2 ? Effect.void : wake
      }),
      Effect.forever,
      Effect.forkScoped
    )

  })

/** The delivery engine as a background feature: runs for the lifetime of the layer. */
export const deliveryWorkerLayer = (options: DeliveryWorkerOptions = {}) => Layer.scopedDiscard(makeDeliveryWorker(options))

export const DeliveryWorkerLive = deliveryWorkerLayer()
