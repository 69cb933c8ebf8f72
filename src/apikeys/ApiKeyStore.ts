import { Context, type Effect, type Option, Schema, type Scope } from "effect"
import type { StoreError } from "../kernel/StoreError.js"

/** A scoped API key as stored: only the SHA-256 of the key, never the key. */
export const StoredApiKey = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  keyHash: Schema.String,
  agentIds: Schema.Array(Schema.String),
  createdAt: Schema.String,
  /** ISO 8601; absent: the key does not expire. */
  expiresAt: Schema.optional(Schema.String),
  /** After a rotation with a grace period: the replaced key's hash, still accepted until `until` (ISO 8601). */
  previous: Schema.optional(Schema.Struct({ keyHash: Schema.String, until: Schema.String }))
})
export type StoredApiKey = typeof StoredApiKey.Type

/** A stored key with when it was last used to authenticate (null: never). */
export interface ListedApiKey {
  readonly key: StoredApiKey
  readonly lastUsedAt: string | null
}

/**
 * Where scoped API keys live (docs/api.md, "API keys"). Every instance reads the same store on
 * every request, so a revoked key is refused at once everywhere; `subscribeRevocations` tells
 * every instance (in-process for memory, Redis pub/sub for Redis) so it can close the revoked
 * key's open agent sockets.
 */
export interface ApiKeyStoreShape {
  readonly insert: (key: StoredApiKey) => Effect.Effect<void, StoreError>
  /** The key whose current hash is `keyHash`, or whose previous hash it is while its grace lasts (the caller checks times). */
  readonly findByHash: (keyHash: string) => Effect.Effect<Option.Option<StoredApiKey>, StoreError>
  readonly get: (id: string) => Effect.Effect<Option.Option<StoredApiKey>, StoreError>
  /** Every key, in no particular order. */
  readonly list: Effect.Effect<ReadonlyArray<ListedApiKey>, StoreError>
  /** Deletes the key and every hash of it, and announces the revocation; none when there was no such key. */
  readonly remove: (id: string) => Effect.Effect<Option.Option<StoredApiKey>, StoreError>
  /** Replaces the key's hash; `previous` keeps the old hash accepted until then. None when there is no such key. */
  readonly replaceHash: (
    id: string,
    keyHash: string,
    previous: { readonly keyHash: string; readonly until: string } | undefined
  ) => Effect.Effect<Option.Option<StoredApiKey>, StoreError>
  /** Records a use of the key (best effort: callers throttle it). */
  readonly touch: (id: string, at: string) => Effect.Effect<void, StoreError>
  /** Calls `onRevoked(id)` for every key revoked from now on, on any instance, until the scope closes. */
  readonly subscribeRevocations: (onRevoked: (id: string) => void) => Effect.Effect<void, StoreError, Scope.Scope>
}

export class ApiKeyStore extends Context.Tag("callgate/ApiKeyStore")<ApiKeyStore, ApiKeyStoreShape>() {}
