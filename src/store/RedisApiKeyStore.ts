import { Effect, Layer, Option, Schema } from "effect"
import { ApiKeyStore, StoredApiKey } from "../apikeys/ApiKeyStore.js"
import { RedisConnection, redisCall } from "./RedisConnection.js"
import { StoreError } from "../core/StoreError.js"

const decodeKey = Schema.decodeUnknown(Schema.parseJson(StoredApiKey))

export const makeRedisApiKeyStore = Effect.gen(function* () {
  const { client, keys } = yield* RedisConnection
  return ApiKeyStore.of({
    insert: (key) =>
      redisCall("apiKey.insert", () => client.set(keys.apiKey(key.keyHash), JSON.stringify(key))).pipe(Effect.asVoid),
    findByHash: (keyHash) =>
      redisCall("apiKey.find", () => client.get(keys.apiKey(keyHash))).pipe(
        Effect.flatMap((raw) =>
          raw === null
            ? Effect.succeed(Option.none())
            : decodeKey(raw).pipe(
                Effect.map(Option.some),
                Effect.mapError((cause) => new StoreError({ operation: "apiKey.find", cause }))
              )
        )
      )
  })
})

export const RedisApiKeyStoreLive = Layer.effect(ApiKeyStore, makeRedisApiKeyStore)
