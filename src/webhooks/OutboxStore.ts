import { Context, type Effect, type Option } from "effect"
import type { StoreError } from "../kernel/StoreError.js"
import type { StoredDelivery } from "./Delivery.js"

/**
 * Where webhook deliveries live between being accepted and being settled. Two adapters (in-memory,
 * Redis) pass one contract suite (test/webhooks/OutboxStore.contract.ts).
 *
 * A pending delivery is either due (waiting for `nextAttemptAt`) or leased: `claim` moves due
 * deliveries into a lease that expires at `now + leaseMs`, and hands out a lease token that is
 * different for every claim. Only the holder of the current token may `renew`, `release` or
 * `finish`, so two workers never act on the same attempt; a lease left by a crashed worker expires
 * and the delivery is claimed again (at-least-once). Times are epoch milliseconds, given by the
 * caller, so all instances and tests agree on one clock.
 */

export interface Claim {
  readonly delivery: StoredDelivery
  readonly lease: string
}

/**
 * Claims are bounded per destination host (`hostOf(delivery.url)`): a claim takes a due delivery
 * only while the claimer holds fewer than `perHost` of that host's, so one slow receiver's backlog
 * neither fills a worker nor delays other receivers. Expired leases are taken regardless.
 */
export interface HostCapacity {
  readonly perHost: number
  /** Deliveries the claimer already holds (in flight or waiting), by host. */
  readonly held: ReadonlyMap<string, number>
}

export interface ClaimBatch {
  readonly claims: ReadonlyArray<Claim>
  /** When the earliest delivery still waiting becomes due, if any. */
  readonly nextDueAt: Option.Option<number>
}

export type FinishResult =
  | { readonly _tag: "Written" }
  /** The lease expired and someone else claimed the delivery: nothing was written. */
  | { readonly _tag: "LeaseLost" }
  /** The webhook was removed while the attempt ran; a retry was not scheduled. Finish it as cancelled. */
  | { readonly _tag: "CancelRequested"; readonly reason: string }

export type RequeueResult =
  | { readonly _tag: "Requeued"; readonly delivery: StoredDelivery }
  | { readonly _tag: "NotFound" }
  | { readonly _tag: "AlreadyPending" }

export interface DeliveryPageResult {
  readonly deliveries: ReadonlyArray<StoredDelivery>
  /** Pass as `before` for the next (older) page. */
  readonly next: Option.Option<number>
}

export interface OutboxStats {
  /** Pending deliveries: due or leased. */
  readonly depth: number
  /** When the longest-waiting pending delivery was accepted (or retried by hand). */
  readonly oldestPendingSince: Option.Option<number>
}

/** Settled deliveries are kept this long for the delivery log, then dropped. */
export const SETTLED_RETENTION_MS = 30 * 24 * 60 * 60 * 1000

export interface OutboxStoreShape {
  /**
   * Stores a new pending delivery, due at its `nextAttemptAt`. Resolves once it is stored. A delivery
   * whose id is already stored (pending or settled) is left as it is: offering an event twice queues it once.
   */
  readonly insert: (delivery: StoredDelivery) => Effect.Effect<void, StoreError>
  readonly get: (agentId: string, environmentId: string, id: string) => Effect.Effect<Option.Option<StoredDelivery>, StoreError>
  /** Newest first. */
  readonly list: (
    agentId: string,
    environmentId: string,
    page: { readonly limit: number; readonly before?: number | undefined }
  ) => Effect.Effect<DeliveryPageResult, StoreError>
  /**
   * Leases up to `limit` deliveries whose lease expired by `now`, then that are due by `now`
   * (longest-due first, within `capacity`).
   */
  readonly claim: (now: number, leaseMs: number, limit: number, capacity: HostCapacity) => Effect.Effect<ClaimBatch, StoreError>
  /** Extends a lease the caller still holds to `until`; false when it was lost. */
  readonly renew: (id: string, lease: string, until: number) => Effect.Effect<boolean, StoreError>
  /** Gives a lease back unattempted, due again at `dueAt`; false when it was lost. */
  readonly release: (id: string, lease: string, dueAt: number) => Effect.Effect<boolean, StoreError>
  /**
   * Writes the outcome of an attempt and ends the lease: `next.state` pending makes it due again at
   * `next.nextAttemptAt`; any other state settles it.
   */
  readonly finish: (id: string, lease: string, next: StoredDelivery) => Effect.Effect<FinishResult, StoreError>
  /**
   * Cancels the environment's due deliveries with `reason` and returns their ids; leased ones are
   * flagged so their `finish` cannot schedule another attempt.
   */
  readonly cancelPending: (
    agentId: string,
    environmentId: string,
    reason: string,
    now: number
  ) => Effect.Effect<ReadonlyArray<string>, StoreError>
  /** Makes a settled delivery pending again via `update`; refused while it is pending. */
  readonly requeue: (
    agentId: string,
    environmentId: string,
    id: string,
    update: (delivery: StoredDelivery) => StoredDelivery
  ) => Effect.Effect<RequeueResult, StoreError>
  readonly stats: Effect.Effect<OutboxStats, StoreError>
}

export class OutboxStore extends Context.Tag("callgate/OutboxStore")<OutboxStore, OutboxStoreShape>() {}
