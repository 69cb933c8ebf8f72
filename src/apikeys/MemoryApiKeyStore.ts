import { Effect, Layer, Option } from "effect"
import { ApiKeyStore, type StoredApiKey } from "./ApiKeyStore.js"

export const makeMemoryApiKeyStore = Effect.sync(() => {
  const byId = new Map<string, StoredApiKey>()
  const idByHash = new Map<string, string>()
  const lastUsed = new Map<string, string>()
  const listeners = new Set<(id: string) => void>()
  const forgetHashes = (key: StoredApiKey) => {
    idByHash.delete(key.keyHash)
    if (key.previous) idByHash.delete(key.previous.keyHash)
  }
  return ApiKeyStore.of({
    insert: (key) =>
      Effect.sync(() => {
        byId.set(key.id, key)
        idByHash.set(key.keyHash, key.id)
      }),
    findByHash: (keyHash) =>
      Effect.sync(() => {
        const id = idByHash.get(keyHash)
        return Option.fromNullable(id === undefined ? undefined : byId.get(id))
      }),
    get: (id) => Effect.sync(() => Option.fromNullable(byId.get(id))),
    list: Effect.sync(() => [...byId.values()].map((key) => ({ key, lastUsedAt: lastUsed.get(key.id) ?? null }))),
    remove: (id) =>
      Effect.sync(() => {
        const key = byId.get(id)
        if (key === undefined) return Option.none()
        byId.delete(id)
        lastUsed.delete(id)
        forgetHashes(key)
        for (const listener of listeners) listener(id)
        return Option.some(key)
      }),
    replaceHash: (id, keyHash, previous) =>
      Effect.sync(() => {
        const key = byId.get(id)
        if (key === undefined) return Option.none()
        forgetHashes(key)
        const { previous: _dropped, ...rest } = key
        const next: StoredApiKey = previous === undefined ? { ...rest, keyHash } : { ...rest, keyHash, previous }
        byId.set(id, next)
        idByHash.set(keyHash, id)
        if (previous) idByHash.set(previous.keyHash, id)
        return Option.some(next)
      }),
    touch: (id, at) =>
      Effect.sync(() => {
        if (byId.has(id)) lastUsed.set(id, at)
      }),
    subscribeRevocations: (onRevoked) =>
      Effect.acquireRelease(
        Effect.sync(() => listeners.add(onRevoked)),
        () => Effect.sync(() => listeners.delete(onRevoked))
      ).pipe(Effect.asVoid)
  })
})

export const MemoryApiKeyStoreLive = Layer.effect(ApiKeyStore, makeMemoryApiKeyStore)
