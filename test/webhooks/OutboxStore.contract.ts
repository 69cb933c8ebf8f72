import { expect, layer } from "@effect/vitest"
import { Effect, type Layer, Option } from "effect"
import type { StoredDelivery } from "../../src/webhooks/Delivery.js"
import type { OutboxStoreShape } from "../../src/webhooks/OutboxStore.js"
import { uniqueId } from "../support/testApp.js"

const T0 = 1_800_000_000_000
const LEASE = 10_000
const anyHost = { perHost: 1000, held: new Map<string, number>() }

export const sampleDelivery = (overrides: Partial<StoredDelivery> = {}): StoredDelivery => {
  const createdAt = overrides.createdAt ?? T0
  const sessionId = uniqueId("ses")
  return {
    id: uniqueId("dlv"),
    event: "session.ended",
    agentId: "agent_a",
    environmentId: "env_a",
    sessionId,
    body: JSON.stringify({ event: "session.ended", sessionId }),
    url: "https://hooks.example.com/callgate",
    state: "pending",
    createdAt,
    updatedAt: createdAt,
    nextAttemptAt: createdAt,
    retriesUsed: 0,
    automaticRetries: true,
    reason: null,
    attempts: [],
    ...overrides
  }
}

const ids = (claims: ReadonlyArray<{ delivery: StoredDelivery }>) => claims.map((c) => c.delivery.id).sort()

/**
 * The behaviour every OutboxStore adapter must have. Each test gets a fresh, empty outbox from
 * `fresh` (claims are queue-wide, so tests must not share one).
 */
export const outboxStoreContract = <R>(adapter: string, deps: Layer.Layer<R, unknown>, fresh: Effect.Effect<OutboxStoreShape, never, R>) =>
  layer(deps, { excludeTestServices: true, timeout: "30 seconds" })(`OutboxStore contract (${adapter})`, (it) => {
    it.effect("stores a delivery and reads it back only under its own environment", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const d = sampleDelivery({ agentId: uniqueId("agent") })
        yield* store.insert(d)
        expect(yield* store.get(d.agentId, d.environmentId, d.id)).toEqual(Option.some(d))
        expect(yield* store.get("someone_else", d.environmentId, d.id)).toEqual(Option.none())
        expect(yield* store.get(d.agentId, d.environmentId, uniqueId("dlv"))).toEqual(Option.none())
      }))

    it.effect("inserting an id already stored (pending or settled) leaves it as it is: one delivery, claimed once", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const d = sampleDelivery({ agentId: uniqueId("agent") })
        yield* store.insert(d)
        yield* store.insert({ ...d, body: "offered again" })
        expect(Option.map(yield* store.get(d.agentId, d.environmentId, d.id), (x) => x.body)).toEqual(Option.some(d.body))
        const batch = yield* store.claim(T0, LEASE, 10, anyHost)
        expect(ids(batch.claims)).toEqual([d.id])
        const claim = batch.claims[0]!
        yield* store.finish(d.id, claim.lease, { ...claim.delivery, state: "delivered", updatedAt: T0 })
        yield* store.insert(d)
        expect(Option.map(yield* store.get(d.agentId, d.environmentId, d.id), (x) => x.state)).toEqual(Option.some("delivered"))
        expect((yield* store.claim(T0 + LEASE * 2, LEASE, 10, anyHost)).claims).toEqual([])
      }))

    it.effect("lists an environment's deliveries newest first, page by page", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const agentId = uniqueId("agent")
        const made = Array.from({ length: 5 }, (_, i) => sampleDelivery({ agentId, createdAt: T0 + i }))
        for (const d of made) yield* store.insert(d)
        yield* store.insert(sampleDelivery({ agentId, environmentId: "env_other" }))
        const first = yield* store.list(agentId, "env_a", { limit: 2 })
        expect(first.deliveries.map((d) => d.id)).toEqual([made[4]!.id, made[3]!.id])
        const second = yield* store.list(agentId, "env_a", { limit: 2, before: Option.getOrThrow(first.next) })
        expect(second.deliveries.map((d) => d.id)).toEqual([made[2]!.id, made[1]!.id])
        const third = yield* store.list(agentId, "env_a", { limit: 2, before: Option.getOrThrow(second.next) })
        expect(third.deliveries.map((d) => d.id)).toEqual([made[0]!.id])
        expect(third.next).toEqual(Option.none())
        expect((yield* store.list(agentId, "env_a", { limit: 5 })).next).toEqual(Option.none())
        expect((yield* store.list(uniqueId("agent"), "env_a", { limit: 5 })).deliveries).toEqual([])
      }))

    it.effect("claims only what is due, and tells when the next delivery becomes due", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const now = sampleDelivery({ nextAttemptAt: T0 })
        const later = sampleDelivery({ nextAttemptAt: T0 + 5000 })
        yield* store.insert(later)
        yield* store.insert(now)
        const batch = yield* store.claim(T0, LEASE, 10, anyHost)
        expect(ids(batch.claims)).toEqual([now.id])
        expect(batch.claims[0]!.delivery).toEqual(now)
        expect(batch.nextDueAt).toEqual(Option.some(T0 + 5000))
        expect(ids((yield* store.claim(T0 + 5000, LEASE, 10, anyHost)).claims)).toEqual([later.id])
        expect((yield* store.claim(T0 + 5000, LEASE, 10, anyHost)).nextDueAt).toEqual(Option.none())
      }))

    it.effect("claims the longest-due first, up to the limit", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const made = [3, 1, 2].map((n) => sampleDelivery({ nextAttemptAt: T0 + n }))
        for (const d of made) yield* store.insert(d)
        const batch = yield* store.claim(T0 + 10, LEASE, 2, anyHost)
        expect(batch.claims.map((c) => c.delivery.id)).toEqual([made[1]!.id, made[2]!.id])
        expect(batch.nextDueAt).toEqual(Option.some(T0 + 3))
      }))

    it.effect("a leased delivery is not claimed again until its lease expires; then only the new holder may finish it", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const d = sampleDelivery()
        yield* store.insert(d)
        const first = (yield* store.claim(T0, LEASE, 10, anyHost)).claims[0]!
        expect((yield* store.claim(T0 + LEASE - 1, LEASE, 10, anyHost)).claims).toEqual([])
        const second = (yield* store.claim(T0 + LEASE, LEASE, 10, anyHost)).claims[0]!
        expect(second.delivery.id).toBe(d.id)
        expect(second.lease).not.toBe(first.lease)
        const delivered = { ...d, state: "delivered" as const, nextAttemptAt: null }
        expect(yield* store.finish(d.id, first.lease, delivered)).toEqual({ _tag: "LeaseLost" })
        expect(yield* store.renew(d.id, first.lease, T0 + 99_999)).toBe(false)
        expect(yield* store.release(d.id, first.lease, T0)).toBe(false)
        expect(yield* store.finish(d.id, second.lease, delivered)).toEqual({ _tag: "Written" })
        expect(yield* store.finish(d.id, second.lease, delivered)).toEqual({ _tag: "LeaseLost" })
        expect(Option.map(yield* store.get(d.agentId, d.environmentId, d.id), (x) => x.state)).toEqual(Option.some("delivered"))
      }))

    it.effect("expired leases are reclaimed before due deliveries", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const crashed = sampleDelivery({ nextAttemptAt: T0 })
        yield* store.insert(crashed)
        yield* store.claim(T0, LEASE, 10, anyHost)
        const waiting = sampleDelivery({ nextAttemptAt: T0 })
        yield* store.insert(waiting)
        const batch = yield* store.claim(T0 + LEASE + 1, LEASE, 1, anyHost)
        expect(ids(batch.claims)).toEqual([crashed.id])
      }))

    it.effect("finishing as pending makes it due again at its next attempt time, with the attempt recorded", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const d = sampleDelivery()
        yield* store.insert(d)
        const claim = (yield* store.claim(T0, LEASE, 10, anyHost)).claims[0]!
        const retry: StoredDelivery = {
          ...d,
          updatedAt: T0 + 50,
          nextAttemptAt: T0 + 5000,
          retriesUsed: 1,
          attempts: [{ attempt: 1, startedAt: T0, durationMs: 50, statusCode: 503, error: null, outcome: "retry" }]
        }
        expect(yield* store.finish(d.id, claim.lease, retry)).toEqual({ _tag: "Written" })
        expect((yield* store.claim(T0 + 4999, LEASE, 10, anyHost)).claims).toEqual([])
        const again = (yield* store.claim(T0 + 5000, LEASE, 10, anyHost)).claims
        expect(again.map((c) => c.delivery)).toEqual([retry])
      }))

    it.effect("settled deliveries are never claimed again", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        for (const state of ["delivered", "failed", "exhausted", "cancelled"] as const) {
          const d = sampleDelivery()
          yield* store.insert(d)
          const claim = (yield* store.claim(T0, LEASE, 10, anyHost)).claims[0]!
          yield* store.finish(d.id, claim.lease, { ...d, state, nextAttemptAt: null, reason: state === "delivered" ? null : "why" })
        }
        expect((yield* store.claim(T0 + 10 * LEASE, LEASE, 10, anyHost)).claims).toEqual([])
        expect((yield* store.stats).depth).toBe(0)
      }))

    it.effect("renew extends a lease; release hands it back due at the given time", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const d = sampleDelivery()
        yield* store.insert(d)
        const claim = (yield* store.claim(T0, LEASE, 10, anyHost)).claims[0]!
        expect(yield* store.renew(d.id, claim.lease, T0 + 3 * LEASE)).toBe(true)
        expect((yield* store.claim(T0 + 2 * LEASE, LEASE, 10, anyHost)).claims).toEqual([])
        expect(yield* store.release(d.id, claim.lease, T0 + 2 * LEASE + 100)).toBe(true)
        expect(yield* store.finish(d.id, claim.lease, { ...d, state: "delivered" })).toEqual({ _tag: "LeaseLost" })
        expect((yield* store.claim(T0 + 2 * LEASE + 99, LEASE, 10, anyHost)).claims).toEqual([])
        expect(ids((yield* store.claim(T0 + 2 * LEASE + 100, LEASE, 10, anyHost)).claims)).toEqual([d.id])
      }))

    it.effect("cancelPending cancels the environment's due deliveries and stops leased ones from being retried", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const agentId = uniqueId("agent")
        const leased = sampleDelivery({ agentId })
        yield* store.insert(leased)
        const claim = (yield* store.claim(T0, LEASE, 10, anyHost)).claims[0]!
        const due = sampleDelivery({ agentId, nextAttemptAt: T0 + 100 })
        const otherEnv = sampleDelivery({ agentId, environmentId: "env_b", nextAttemptAt: T0 + 100 })
        yield* store.insert(due)
        yield* store.insert(otherEnv)

        const cancelled = yield* store.cancelPending(agentId, "env_a", "webhook removed", T0 + 10)
        expect(cancelled).toEqual([due.id])
        const after = Option.getOrThrow(yield* store.get(agentId, "env_a", due.id))
        expect([after.state, after.reason, after.nextAttemptAt, after.updatedAt]).toEqual(["cancelled", "webhook removed", null, T0 + 10])

        const retry = { ...leased, nextAttemptAt: T0 + 5000, retriesUsed: 1 }
        expect(yield* store.finish(leased.id, claim.lease, retry)).toEqual({ _tag: "CancelRequested", reason: "webhook removed" })
        expect(
          yield* store.finish(leased.id, claim.lease, { ...retry, state: "cancelled", nextAttemptAt: null, reason: "webhook removed" })
        ).toEqual({ _tag: "Written" })

        const claimable = yield* store.claim(T0 + 10 * LEASE, LEASE, 10, anyHost)
        expect(ids(claimable.claims)).toEqual([otherEnv.id])
      }))

    it.effect("an attempt already in flight when the webhook is removed may still settle as delivered", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const d = sampleDelivery({ agentId: uniqueId("agent") })
        yield* store.insert(d)
        const claim = (yield* store.claim(T0, LEASE, 10, anyHost)).claims[0]!
        expect(yield* store.cancelPending(d.agentId, d.environmentId, "webhook removed", T0)).toEqual([])
        expect(yield* store.finish(d.id, claim.lease, { ...d, state: "delivered", nextAttemptAt: null })).toEqual({ _tag: "Written" })
      }))

    it.effect("requeue makes a settled delivery pending again and refuses pending or unknown ones", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const d = sampleDelivery({ agentId: uniqueId("agent") })
        yield* store.insert(d)
        const update = (x: StoredDelivery): StoredDelivery => ({ ...x, state: "pending", updatedAt: T0 + 500, nextAttemptAt: T0 + 500, automaticRetries: false, reason: null })
        expect(yield* store.requeue(d.agentId, d.environmentId, d.id, update)).toEqual({ _tag: "AlreadyPending" })
        const claim = (yield* store.claim(T0, LEASE, 10, anyHost)).claims[0]!
        expect(yield* store.requeue(d.agentId, d.environmentId, d.id, update)).toEqual({ _tag: "AlreadyPending" })
        yield* store.finish(d.id, claim.lease, { ...d, state: "exhausted", nextAttemptAt: null, reason: "gave up" })
        expect(yield* store.requeue(d.agentId, d.environmentId, uniqueId("dlv"), update)).toEqual({ _tag: "NotFound" })
        expect(yield* store.requeue("someone_else", d.environmentId, d.id, update)).toEqual({ _tag: "NotFound" })

        const result = yield* store.requeue(d.agentId, d.environmentId, d.id, update)
        expect(result._tag).toBe("Requeued")
        const stored = Option.getOrThrow(yield* store.get(d.agentId, d.environmentId, d.id))
        expect([stored.state, stored.automaticRetries, stored.reason]).toEqual(["pending", false, null])
        expect((yield* store.claim(T0 + 499, LEASE, 10, anyHost)).claims).toEqual([])
        expect(ids((yield* store.claim(T0 + 500, LEASE, 10, anyHost)).claims)).toEqual([d.id])
        expect(Option.getOrThrow((yield* store.stats).oldestPendingSince)).toBe(T0 + 500)
      }))

    it.effect("stats count due and leased deliveries and know the oldest pending one", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        expect(yield* store.stats).toEqual({ depth: 0, oldestPendingSince: Option.none() })
        yield* store.insert(sampleDelivery({ createdAt: T0 + 20, nextAttemptAt: T0 + 20 }))
        yield* store.insert(sampleDelivery({ createdAt: T0 + 10, nextAttemptAt: T0 + 10 }))
        yield* store.insert(sampleDelivery({ createdAt: T0 + 30, nextAttemptAt: T0 + 9999 }))
        yield* store.claim(T0 + 10, LEASE, 1, anyHost)
        expect(yield* store.stats).toEqual({ depth: 3, oldestPendingSince: Option.some(T0 + 10) })
      }))

    it.effect("claims stay within the per-host capacity, counting what the claimer already holds", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const a = Array.from({ length: 4 }, (_, i) => sampleDelivery({ url: "https://a.example.com/hook", nextAttemptAt: T0 + i }))
        const b = Array.from({ length: 3 }, (_, i) => sampleDelivery({ url: "https://b.example.com:8443/hook", nextAttemptAt: T0 + 10 + i }))
        for (const d of [...a, ...b]) yield* store.insert(d)
        const batch = yield* store.claim(T0 + 100, LEASE, 10, { perHost: 2, held: new Map([["a.example.com", 1]]) })
        expect(ids(batch.claims)).toEqual([a[0]!.id, b[0]!.id, b[1]!.id].sort())
        // The deliveries left behind are due already: the claimer learns that, and can come back.
        expect(batch.nextDueAt).toEqual(Option.some(T0 + 1))
      }))

    it.effect("concurrent claimers never get the same delivery", () =>
      Effect.gen(function* () {
        const store = yield* fresh
        const made = Array.from({ length: 60 }, () => sampleDelivery())
        yield* Effect.forEach(made, (d) => store.insert(d), { concurrency: 10 })
        const batches = yield* Effect.all(
          Array.from({ length: 12 }, () => store.claim(T0, LEASE, 7, anyHost)),
          { concurrency: "unbounded" }
        )
        const claimed = batches.flatMap((b) => b.claims.map((c) => c.delivery.id))
        expect(claimed).toHaveLength(60)
        expect(new Set(claimed).size).toBe(60)
      }))
  })
