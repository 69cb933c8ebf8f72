import { Context, type Effect, type Option } from "effect"
import type { StoreError } from "../kernel/StoreError.js"

/** One environment's idle dial-in agent sockets on one instance. */
export interface IdleAgents {
  readonly agentId: string
  readonly environmentId: string
  /** The sockets' ids (AgentPool), oldest first. */
  readonly sockets: ReadonlyArray<string>
}

/** What an instance says about itself at every refresh (docs/scaling.md, "The instance registry"). */
export interface InstanceReport {
  readonly id: string
  /** The address carriers and agents reach that very instance at. */
  readonly publicUrl: string
  readonly draining: boolean
  readonly liveCalls: number
  readonly startedAt: string
  /** Idle dial-in agents per environment, as counts (the sockets go to the placement keys). */
  readonly idleAgents: ReadonlyArray<{ readonly agentId: string; readonly environmentId: string; readonly idle: number }>
}

/** A live instance as the registry lists it. */
export interface InstanceEntry extends InstanceReport {
  /** When it last refreshed its entry, in the store's clock. */
  readonly lastSeenAt: string
}

/** One idle dial-in agent socket held for a call being placed. */
export interface AgentReservation {
  readonly instanceId: string
  readonly socketId: string
}

/**
 * The fleet's shared view (docs/scaling.md): the instance registry and the idle dial-in agents of
 * every environment, with the reservations placement takes on them. Time is the store's own clock
 * (one clock for the whole fleet). An instance that has not refreshed for `goneAfterMs` is gone:
 * it is not listed and its agents are never reserved. Two adapters (in-memory, Redis) pass one
 * contract suite (test/fleet/InstanceStore.contract.ts).
 */
export interface InstanceStoreShape {
  /** Writes the instance's entry (live for `goneAfterMs` from now). */
  readonly report: (report: InstanceReport, goneAfterMs: number) => Effect.Effect<void, StoreError>
  /**
   * Replaces the instance's idle sockets of one environment (an empty list withdraws them) and
   * marks the instance live for that environment.
   */
  readonly publishIdle: (instanceId: string, idle: IdleAgents) => Effect.Effect<void, StoreError>
  /** Live instances, by id. */
  readonly list: (goneAfterMs: number) => Effect.Effect<ReadonlyArray<InstanceEntry>, StoreError>
  /**
   * Instances that stopped refreshing more than `goneAfterMs` ago without withdrawing (they died):
   * their ids, while the registry still remembers them (entries are pruned after six times that).
   */
  readonly silent: (goneAfterMs: number) => Effect.Effect<ReadonlyArray<string>, StoreError>
  /**
   * Atomically holds one idle socket of the environment that no other reservation holds, on a
   * live instance: `preferred` when it has one, otherwise the instance with the most free ones;
   * never on `avoid` (an instance that takes no new calls: draining, or its hold nearly out). The
   * hold lapses after `holdMs`; none anywhere is None.
   */
  readonly reserve: (
    agentId: string,
    environmentId: string,
    preferred: string,
    holdMs: number,
    goneAfterMs: number,
    avoid?: string
  ) => Effect.Effect<Option.Option<AgentReservation>, StoreError>
  /** Removes the instance from the registry and withdraws its idle sockets (orderly shutdown). */
  readonly withdraw: (instanceId: string, environments: ReadonlyArray<{ readonly agentId: string; readonly environmentId: string }>) => Effect.Effect<void, StoreError>
}

export class InstanceStore extends Context.Tag("callgate/InstanceStore")<InstanceStore, InstanceStoreShape>() {}
