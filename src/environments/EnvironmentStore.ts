import { Context, type Effect, type Either, type Option } from "effect"
import type { StoredEnvironment } from "./EnvironmentSchema.js"
import type { StoreError } from "../kernel/StoreError.js"

/**
 * Where environments live. Two adapters (in-memory, Redis) pass one contract suite
 * (test/store/EnvironmentStore.contract.ts).
 *
 * `update` is a read-modify-write that never loses a concurrent write: the adapter re-reads and
 * re-applies `change` when another writer got in between. `change` must be pure; it may refuse the
 * write with a Left, which `update` returns as its failure.
 */
export interface EnvironmentStoreShape {
  readonly insert: (environment: StoredEnvironment) => Effect.Effect<void, StoreError>
  readonly get: (agentId: string, environmentId: string) => Effect.Effect<Option.Option<StoredEnvironment>, StoreError>
  /** Oldest first. */
  readonly list: (agentId: string) => Effect.Effect<ReadonlyArray<StoredEnvironment>, StoreError>
  readonly update: <E>(
    agentId: string,
    environmentId: string,
    change: (current: StoredEnvironment) => Either.Either<StoredEnvironment, E>
  ) => Effect.Effect<Option.Option<StoredEnvironment>, StoreError | E>
  readonly remove: (agentId: string, environmentId: string) => Effect.Effect<boolean, StoreError>
  /** Every agent that has at least one environment, with how many, by agent id. */
  readonly listAgents: Effect.Effect<ReadonlyArray<AgentEnvironmentCount>, StoreError>
  /** Fails when the backing store cannot be reached (readiness). */
  readonly ping: Effect.Effect<void, StoreError>
}

export interface AgentEnvironmentCount {
  readonly agentId: string
  readonly environments: number
}

export class EnvironmentStore extends Context.Tag("callgate/EnvironmentStore")<EnvironmentStore, EnvironmentStoreShape>() {}
