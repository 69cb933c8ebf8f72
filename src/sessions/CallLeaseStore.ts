import { Context, type Effect } from "effect"
import type { StoreError } from "../kernel/StoreError.js"

/** Which count a call takes a place in: every call counts towards `maxConcurrentCalls`, outbound ones also towards `maxConcurrentOutboundCalls`. */
export type LeaseKind = "inbound" | "outbound"

/** An environment's fleet-wide limits; null: no limit. */
export interface LeaseLimits {
  /** `maxConcurrentCalls`: inbound and outbound together. */
  readonly total: number | null
  /** `maxConcurrentOutboundCalls`. */
  readonly outbound: number | null
}

export type LeaseVerdict =
  | { readonly _tag: "Granted" }
  | { readonly _tag: "Refused"; readonly limit: "maxConcurrentCalls" | "maxConcurrentOutboundCalls"; readonly max: number }

export interface HeldLease {
  readonly sessionId: string
  readonly kind: LeaseKind
}

/**
 * The fleet's call leases (docs/scaling.md, "Fleet-wide call limits"): per environment, the
 * sessions holding a place, each until its lease's expiry. A lease lives `ttlMs` unless its
 * instance renews it, so the places of a dead instance's calls come back on their own. Times are
 * the store's clock (Redis TIME), so instances' clocks do not matter. Every operation is atomic.
 */
export interface CallLeaseStoreShape {
  /** Takes a place for `sessionId` when the limits allow (a session holding one already keeps it). */
  readonly acquire: (
    lease: { readonly agentId: string; readonly environmentId: string; readonly sessionId: string; readonly kind: LeaseKind },
    limits: LeaseLimits,
    ttlMs: number
  ) => Effect.Effect<LeaseVerdict, StoreError>
  /** Extends the given leases of one environment by `ttlMs` from now; leases already gone stay gone. */
  readonly renew: (agentId: string, environmentId: string, leases: ReadonlyArray<HeldLease>, ttlMs: number) => Effect.Effect<void, StoreError>
  readonly release: (agentId: string, environmentId: string, sessionId: string) => Effect.Effect<void, StoreError>
  /** Places held now (expired leases not counted). */
  readonly count: (agentId: string, environmentId: string) => Effect.Effect<{ readonly total: number; readonly outbound: number }, StoreError>
}

export class CallLeaseStore extends Context.Tag("callgate/CallLeaseStore")<CallLeaseStore, CallLeaseStoreShape>() {}
