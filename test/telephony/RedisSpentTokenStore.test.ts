import { expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { inject } from "vitest"
import { makeRedisConnection, RedisConnection } from "../../src/redis/RedisConnection.js"
import { makeRedisSpentTokenStore } from "../../src/redis/RedisSpentTokenStore.js"
import { SpentTokenStore } from "../../src/telephony/SpentTokenStore.js"
import { uniqueId } from "../support/testApp.js"
import { spentTokenStoreContract } from "./SpentTokenStore.contract.js"

const connection = Layer.scoped(RedisConnection, makeRedisConnection(inject("redisUrl"), `${uniqueId("t")}:`))
const store = Layer.effect(SpentTokenStore, makeRedisSpentTokenStore).pipe(Layer.provideMerge(connection))

spentTokenStoreContract("redis", store)

it.effect("a spent token's key expires with the token", () =>
  Effect.gen(function* () {
    const tokens = yield* SpentTokenStore
    const { client, keys } = yield* RedisConnection
    const id = uniqueId("jti")
    yield* tokens.spend(id, Date.now() + 30_000)
    const ttl = yield* Effect.promise(() => client.pttl(keys.spentToken(id)))
    expect(ttl).toBeGreaterThan(0)
    expect(ttl).toBeLessThanOrEqual(30_000)
  }).pipe(Effect.provide(store)))
