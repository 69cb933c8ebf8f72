import { Context, type Effect, type Option, Schema } from "effect"
import type { StoreError } from "../core/StoreError.js"

/** A scoped API key as stored: only the SHA-256 of the key, never the key. */
export const StoredApiKey = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  keyHash: Schema.String,
  agentIds: Schema.Array(Schema.String),
  createdAt: Schema.String
})
export type StoredApiKey = typeof StoredApiKey.Type

export interface ApiKeyStoreShape {
  readonly insert: (key: StoredApiKey) => Effect.Effect<void, StoreError>
  readonly findByHash: (keyHash: string) => Effect.Effect<Option.Option<StoredApiKey>, StoreError>
}

export class ApiKeyStore extends Context.Tag("callgate/ApiKeyStore")<ApiKeyStore, ApiKeyStoreShape>() {}
