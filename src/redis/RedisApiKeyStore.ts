import { Effect, Layer, Option, Schema } from "effect"
import { ApiKeyStore, StoredApiKey } from "../apikeys/ApiKeyStore.js"
import { RedisConnection, redisCall, subscribeOwn } from "./RedisConnection.js"
import { StoreError } from "../kernel/StoreError.js"

const decodeKey = Schema.decodeUnknown(Schema.parseJson(StoredApiKey))
const encode = (key: StoredApiKey) => JSON.stringify(key)

/**
 * Scoped API keys in Redis (layout in src/redis/keys.ts): each record under `apikey:<hash>` for
 * its current hash (and, during a rotation's grace, a copy under the previous hash that expires
 * with the grace), an id -> hash index for listing and by-id access, last use per id, and a
 * pub/sub channel announcing revocations. The records sit in different slots, so writes are
 * ordered (record first, index last) rather than transactional.
 */
export const makeRedisApiKeyStore = Effect.gen(function* () {
  const { client, duplicate, keys, replicated } = yield* RedisConnection

  const read = (operation: string, keyHash: string) =>
    redisCall(operation, () => client.get(keys.apiKey(keyHash))).pipe(
      Effect.flatMap((raw) =>
        raw === null
          ? Effect.succeed(Option.none<StoredApiKey>())
          : decodeKey(raw).pipe(
              Effect.map(Option.some),
              Effect.mapError((cause) => new StoreError({ operation, cause }))
            )
      )
    )

  const get = (id: string) =>
    redisCall("apiKey.get", () => client.hget(keys.apiKeyIndex, id)).pipe(
      Effect.flatMap((keyHash) => (keyHash === null ? Effect.succeed(Option.none<StoredApiKey>()) : read("apiKey.get", keyHash))),
      Effect.map(Option.filter((key) => key.id === id))
    )

  return ApiKeyStore.of({
    insert: (key) =>
      redisCall("apiKey.insert", async () => {
        await client.set(keys.apiKey(key.keyHash), encode(key))
        await client.hset(keys.apiKeyIndex, key.id, key.keyHash)
      }).pipe(
        // In a Cluster the record and the index sit on different primaries: each waits for its replicas.
        Effect.zipRight(replicated(keys.apiKey(key.keyHash), "apiKey.insert")),
        Effect.zipRight(replicated(keys.apiKeyIndex, "apiKey.insert"))
      ),
    findByHash: (keyHash) => read("apiKey.find", keyHash),
    get,
    list: redisCall("apiKey.list", async () => {
      const [index, lastUsed] = await Promise.all([client.hgetall(keys.apiKeyIndex), client.hgetall(keys.apiKeyLastUsed)])
      const entries = Object.entries(index)
      const raws = await Promise.all(entries.map(([, keyHash]) => client.get(keys.apiKey(keyHash))))
      return { raws, lastUsed }
    }).pipe(
      Effect.flatMap(({ raws, lastUsed }) =>
        Effect.forEach(
          raws.filter((raw): raw is string => raw !== null),
          (raw) =>
            decodeKey(raw).pipe(
              Effect.map((key) => ({ key, lastUsedAt: lastUsed[key.id] ?? null })),
              Effect.mapError((cause) => new StoreError({ operation: "apiKey.list", cause }))
            )
        )
      )
    ),
    remove: (id) =>
      get(id).pipe(
        Effect.tap((found) =>
          Option.match(found, {
            onNone: () => Effect.void,
            onSome: (key) =>
              redisCall("apiKey.remove", async () => {
                await client.hdel(keys.apiKeyIndex, id)
                // One DEL per record: the two hashes' keys sit in different slots of a Redis Cluster.
                await client.del(keys.apiKey(key.keyHash))
                if (key.previous) await client.del(keys.apiKey(key.previous.keyHash))
                await client.hdel(keys.apiKeyLastUsed, id)
                await client.publish(keys.apiKeyRevokedChannel, id)
              }).pipe(Effect.zipRight(replicated(keys.apiKeyIndex, "apiKey.remove")))
          })
        )
      ),
    replaceHash: (id, keyHash, previous) =>
      get(id).pipe(
        Effect.flatMap((found) => {
          if (Option.isNone(found)) return Effect.succeed(Option.none<StoredApiKey>())
          const { previous: dropped, ...rest } = found.value
          const next: StoredApiKey = previous === undefined ? { ...rest, keyHash } : { ...rest, keyHash, previous }
          return redisCall("apiKey.rotate", async () => {
            await client.set(keys.apiKey(keyHash), encode(next))
            if (previous) await client.set(keys.apiKey(previous.keyHash), encode(next), "PXAT", Date.parse(previous.until))
            else await client.del(keys.apiKey(found.value.keyHash))
            if (dropped && dropped.keyHash !== previous?.keyHash) await client.del(keys.apiKey(dropped.keyHash))
            await client.hset(keys.apiKeyIndex, id, keyHash)
          }).pipe(
            Effect.zipRight(replicated(keys.apiKey(keyHash), "apiKey.rotate")),
            Effect.zipRight(replicated(keys.apiKeyIndex, "apiKey.rotate")),
            Effect.as(Option.some(next))
          )
        })
      ),
    touch: (id, at) => redisCall("apiKey.touch", () => client.hset(keys.apiKeyLastUsed, id, at)).pipe(Effect.asVoid),
    subscribeRevocations: (onRevoked) => subscribeOwn(duplicate, "apiKey.subscribeRevocations", keys.apiKeyRevokedChannel, onRevoked)
  })
})

export const RedisApiKeyStoreLive = Layer.effect(ApiKeyStore, makeRedisApiKeyStore)
