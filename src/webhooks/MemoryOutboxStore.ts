import { Effect, Layer, Option } from "effect"
import { hostOf, type StoredDelivery } from "./Delivery.js"
import { type Claim, OutboxStore, SETTLED_RETENTION_MS } from "./OutboxStore.js"
import { environmentKey } from "../kernel/EnvironmentKey.js"

interface Entry {
  delivery: StoredDelivery
  readonly seq: number
  /** Set while pending and not leased. */
  dueAt: number | null
  /** Set while leased. */
  leaseUntil: number | null
  lease: number
  cancel: string | null
  pendingSince: number | null
}


/**
 * The embedded outbox: one process, nothing survives a restart. Every operation runs synchronously
 * on the event loop, so none can interleave with another.
 */
export const makeMemoryOutboxStore = Effect.sync(() => {
  const entries = new Map<string, Entry>()
  const pending = new Set<string>()
  const byEnvironment = new Map<string, Array<{ readonly seq: number; readonly id: string }>>()
  let seq = 0
  let leases = 0
  let inserts = 0

  const settle = (id: string, entry: Entry) => {
    entry.dueAt = null
    entry.leaseUntil = null
    entry.cancel = null
    entry.pendingSince = null
    entry.lease++
    pending.delete(id)
  }

  const prune = (now: number) => {
    for (const [id, entry] of entries) {
      if (entry.delivery.state !== "pending" && entry.delivery.updatedAt < now - SETTLED_RETENTION_MS) entries.delete(id)
    }
    for (const [key, index] of byEnvironment) {
      const kept = index.filter((item) => entries.has(item.id))
      if (kept.length === 0) byEnvironment.delete(key)
      else byEnvironment.set(key, kept)
    }
  }

  const owned = (agentId: string, environmentId: string, id: string) => {
    const entry = entries.get(id)
    return entry !== undefined && entry.delivery.agentId === agentId && entry.delivery.environmentId === environmentId
      ? entry
      : undefined
  }

  const holding = (id: string, lease: string) => {
    const entry = entries.get(id)
    return entry !== undefined && entry.leaseUntil !== null && String(entry.lease) === lease ? entry : undefined
  }

  return OutboxStore.of({
    insert: (delivery) =>
      Effect.sync(() => {
        // The same delivery offered again (a replayed session end) is already here.
        if (entries.has(delivery.id)) return
        if (++inserts % 512 === 0) prune(delivery.createdAt)
        const entry: Entry = {
          delivery,
          seq: ++seq,
          dueAt: delivery.nextAttemptAt ?? delivery.createdAt,
          leaseUntil: null,
          lease: 0,
          cancel: null,
          pendingSince: delivery.createdAt
        }
        entries.set(delivery.id, entry)
        pending.add(delivery.id)
        const key = environmentKey(delivery.agentId, delivery.environmentId)
        const index = byEnvironment.get(key) ?? []
        index.push({ seq: entry.seq, id: delivery.id })
        byEnvironment.set(key, index)
      }),

    get: (agentId, environmentId, id) =>
      Effect.sync(() => Option.fromNullable(owned(agentId, environmentId, id)?.delivery)),

    list: (agentId, environmentId, page) =>
      Effect.sync(() => {
        const index = byEnvironment.get(environmentKey(agentId, environmentId)) ?? []
        const found: Array<{ seq: number; delivery: StoredDelivery }> = []
        for (let i = index.length - 1; i >= 0 && found.length <= page.limit; i--) {
          const item = index[i]!
          if (page.before !== undefined && item.seq >= page.before) continue
          const entry = entries.get(item.id)
          if (entry !== undefined) found.push({ seq: item.seq, delivery: entry.delivery })
        }
        const shown = found.slice(0, page.limit)
        return {
          deliveries: shown.map((item) => item.delivery),
          next: found.length > page.limit ? Option.some(shown[shown.length - 1]!.seq) : Option.none()
        }
      }),

    claim: (now, leaseMs, limit, capacity) =>
      Effect.sync(() => {
        const expired: Array<{ id: string; entry: Entry; at: number }> = []
        const due: Array<{ id: string; entry: Entry; at: number }> = []
        for (const id of pending) {
          const entry = entries.get(id)!
          if (entry.leaseUntil !== null) {
            if (entry.leaseUntil <= now) expired.push({ id, entry, at: entry.leaseUntil })
          } else {
            due.push({ id, entry, at: entry.dueAt! })
          }
        }
        expired.sort((a, b) => a.at - b.at)
        due.sort((a, b) => a.at - b.at)
        const held = new Map(capacity.held)
        const claims: Array<Claim> = []
        const take = (entry: Entry, host: string) => {
          held.set(host, (held.get(host) ?? 0) + 1)
          entry.lease = ++leases
          entry.dueAt = null
          entry.leaseUntil = now + leaseMs
          claims.push({ delivery: entry.delivery, lease: String(entry.lease) })
        }
        for (const { entry } of expired.slice(0, limit)) take(entry, hostOf(entry.delivery.url))
        for (const { at, entry } of due) {
          if (claims.length >= limit || at > now) break
          const host = hostOf(entry.delivery.url)
          if ((held.get(host) ?? 0) < capacity.perHost) take(entry, host)
        }
        // The earliest delivery left waiting (possibly already due, for a host at capacity).
        const first = due.find(({ entry }) => entry.leaseUntil === null)
        return { claims, nextDueAt: Option.fromNullable(first?.at) }
      }),

    renew: (id, lease, until) =>
      Effect.sync(() => {
        const entry = holding(id, lease)
        if (entry === undefined) return false
        entry.leaseUntil = until
        return true
      }),

    release: (id, lease, dueAt) =>
      Effect.sync(() => {
        const entry = holding(id, lease)
        if (entry === undefined) return false
        entry.leaseUntil = null
        entry.dueAt = dueAt
        entry.lease = ++leases
        return true
      }),

    finish: (id, lease, next) =>
      Effect.sync(() => {
        const entry = holding(id, lease)
        if (entry === undefined) return { _tag: "LeaseLost" } as const
        if (next.state === "pending" && entry.cancel !== null) return { _tag: "CancelRequested", reason: entry.cancel } as const
        entry.delivery = next
        if (next.state === "pending") {
          entry.leaseUntil = null
          entry.dueAt = next.nextAttemptAt ?? next.updatedAt
          entry.lease = ++leases
        } else {
          settle(id, entry)
        }
        return { _tag: "Written" } as const
      }),

    cancelPending: (agentId, environmentId, reason, now) =>
      Effect.sync(() => {
        const cancelled: Array<string> = []
        for (const id of [...pending]) {
          const entry = owned(agentId, environmentId, id)
          if (entry === undefined) continue
          if (entry.leaseUntil !== null) {
            entry.cancel = reason
            continue
          }
          entry.delivery = { ...entry.delivery, state: "cancelled", reason, updatedAt: now, nextAttemptAt: null }
          settle(id, entry)
          cancelled.push(id)
        }
        return cancelled
      }),

    requeue: (agentId, environmentId, id, update) =>
      Effect.sync(() => {
        const entry = owned(agentId, environmentId, id)
        if (entry === undefined) return { _tag: "NotFound" } as const
        if (pending.has(id)) return { _tag: "AlreadyPending" } as const
        const next = update(entry.delivery)
        entry.delivery = next
        entry.dueAt = next.nextAttemptAt ?? next.updatedAt
        entry.pendingSince = next.updatedAt
        pending.add(id)
        return { _tag: "Requeued", delivery: next } as const
      }),

    stats: Effect.sync(() => {
      let oldest: number | undefined
      for (const id of pending) {
        const since = entries.get(id)!.pendingSince!
        if (oldest === undefined || since < oldest) oldest = since
      }
      return { depth: pending.size, oldestPendingSince: Option.fromNullable(oldest) }
    })
  })
})

export const MemoryOutboxStoreLive = Layer.effect(OutboxStore, makeMemoryOutboxStore)
