import { Effect, Layer, Option } from "effect"
import { ApiKeyStore, type StoredApiKey } from "./ApiKeyStore.js"

export const makeMemoryApiKeyStore = Effect.sync(() => {
  const byHash = new Map<string, StoredApiKey>()
  return ApiKeyStore.of({
    insert: (key) => Effect.sync(() => void byHash.set(key.keyHash, key)),
    findByHash: (keyHash) => Effect.sync(() => Option.fromNullable(byHash.get(keyHash)))
  })
})

export const MemoryApiKeyStoreLive = Layer.effect(ApiKeyStore, makeMemoryApiKeyStore)
