import { Context, type Effect, Schema, type Scope } from "effect"
import type { StoreError } from "../kernel/StoreError.js"

/**
 * A breaker trip as every instance hears it: the environment whose occurrence count reached its
 * threshold, and the session whose occurrence did it. `origin` names the publishing instance so
 * it can ignore its own echo (it has already acted locally).
 */
export const BreakerTrip = Schema.Struct({
  agentId: Schema.String,
  environmentId: Schema.String,
  sessionId: Schema.String,
  count: Schema.Number,
  threshold: Schema.Number,
  origin: Schema.String
}).annotations({ identifier: "BreakerTrip" })
export type BreakerTrip = typeof BreakerTrip.Type

/** The most recent trip of an environment, as the store remembers it, stamped with the store's clock. */
export interface LastTrip {
  /** Epoch milliseconds (the store's clock) when the trip was published. */
  readonly at: number
  readonly sessionId: string
  readonly count: number
  readonly threshold: number
}

/** What the store knows of one environment's window right now (for reading, never for deciding). */
export interface BreakerWindowState {
  /** Occurrences within the window. */
  readonly occurrences: number
  /** When the newest counted occurrence was recorded (epoch ms), if any is counted. */
  readonly newestAt: number | null
  readonly lastTrip: LastTrip | null
}

/**
 * The no-response occurrence window of each (agent, environment), shared by every session and
 * every instance, and the channel trips are broadcast on. Two adapters (in-memory, Redis) pass one
 * contract suite (test/breaker/BreakerStore.contract.ts).
 *
 * The window keeps one entry per session, stamped with the store's own clock when recorded: a
 * session counts at most once, and recording it again refreshes its time. An entry is counted
 * while its age is at most the window; older ones are dropped.
 */
export interface BreakerStoreShape {
  /**
   * The store lives in this process (the embedded store): its operations never wait on anything,
   * so the breaker runs them without a timeout (BREAKER_STORE_TIMEOUT guards a remote store).
   */
  readonly inProcess?: boolean
  /** Records (or refreshes) the session's occurrence, drops expired ones, and returns how many remain. */
  readonly recordOccurrence: (
    agentId: string,
    environmentId: string,
    sessionId: string,
    windowSeconds: number
  ) => Effect.Effect<number, StoreError>
  /** Occurrences within the window, without recording one. */
  readonly count: (agentId: string, environmentId: string, windowSeconds: number) => Effect.Effect<number, StoreError>
  /**
   * Occurrences within the window (expired ones dropped, as `count` does), the newest one's time,
   * and the environment's last trip (kept for `LAST_TRIP_RETENTION_SECONDS`). For dashboards and
   * /v1; the breaker decides on `recordOccurrence`'s count.
   */
  readonly state: (agentId: string, environmentId: string, windowSeconds: number) => Effect.Effect<BreakerWindowState, StoreError>
  /**
   * Takes the environment's probe slot for `sessionId` when no other call holds it: true when
   * taken. The slot frees itself after `intervalSeconds` (one probe call per interval, fleet-wide).
   */
  readonly claimProbe: (agentId: string, environmentId: string, sessionId: string, intervalSeconds: number) => Effect.Effect<boolean, StoreError>
  /** The session holding the probe slot now, if any. */
  readonly probe: (agentId: string, environmentId: string) => Effect.Effect<string | null, StoreError>
  /**
   * Forgets every occurrence of the environment (a successful agent response), and its probe slot;
   * true when a probe slot was held (the breaker was open and probing: this answer closes it).
   */
  readonly clear: (agentId: string, environmentId: string) => Effect.Effect<boolean, StoreError>
  /** Remembers the trip as the environment's last one, and tells every subscribed instance, this one included. */
  readonly publishTrip: (trip: BreakerTrip) => Effect.Effect<void, StoreError>
  /**
   * Calls `handler` with every trip published from now until the scope closes; succeeds once the
   * subscription is active. `handler` runs synchronously and must not throw.
   */
  readonly subscribeTrips: (handler: (trip: BreakerTrip) => void) => Effect.Effect<void, StoreError, Scope.Scope>
  /** Fails when the store cannot be reached. */
  readonly ping: Effect.Effect<void, StoreError>
}

/** How long an environment's last trip stays readable after it happened. */
export const LAST_TRIP_RETENTION_SECONDS = 30 * 24 * 3600

export class BreakerStore extends Context.Tag("callgate/BreakerStore")<BreakerStore, BreakerStoreShape>() {}
