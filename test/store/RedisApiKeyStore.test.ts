import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { inject } from "vitest"
import { RedisApiKeyStoreLive } from "../../src/redis/RedisApiKeyStore.js"
import { RedisConnection, makeRedisConnection } from "../../src/redis/RedisConnection.js"
import { ApiKeyStore } from "../../src/apikeys/ApiKeyStore.js"
import { keys } from "../../src/redis/keys.js"
import { apiKeyStoreContract, sampleApiKey } from "./ApiKeyStore.contract.js"

const connection = Layer.scoped(RedisConnection, makeRedisConnection(inject("redisUrl")))

apiKeyStoreContract("redis", RedisApiKeyStoreLive.pipe(Layer.provide(connection)))

layer(Layer.provideMerge(RedisApiKeyStoreLive, connection), { excludeTestServices: true })("RedisApiKeyStore layout", (it) => {
  it.effect("keeps each key under the callgate prefix, addressed by its hash", () =>
    Effect.gen(function* () {
      const store = yield* ApiKeyStore
      const { client } = yield* RedisConnection
      const key = sampleApiKey()
      yield* store.insert(key)
      expect(keys.apiKey(key.keyHash)).toBe(`callgate:apikey:${key.keyHash}`)
      const raw = yield* Effect.promise(() => client.get(keys.apiKey(key.keyHash)))
      expect(JSON.parse(raw ?? "null")).toEqual(key)
      expect(yield* Effect.promise(() => client.hget(keys.apiKeyIndex, key.id))).toBe(key.keyHash)
    }))
})
