import { Clock, Effect, Layer } from "effect"
import { SpentTokenStore } from "../telephony/SpentTokenStore.js"
import { RedisConnection, redisCall } from "./RedisConnection.js"

/**
 * Spent session tokens in Redis: one key per token id, `SET NX` with the token's expiry, so the
 * first presentation anywhere in the fleet wins and every later one sees the key.
 */
export const makeRedisSpentTokenStore = Effect.gen(function* () {
  const { client, keys } = yield* RedisConnection
  return SpentTokenStore.of({
    spend: (tokenId, expiresAtMs) =>
      Clock.currentTimeMillis.pipe(
        Effect.flatMap((now) =>
          redisCall("spendToken", () => client.set(keys.spentToken(tokenId), "1", "PXAT", Math.max(Math.ceil(expiresAtMs), now + 1000), "NX"))
        ),
        Effect.map((answer) => answer === "OK")
      )
  })
})

export const RedisSpentTokenStoreLive = Layer.effect(SpentTokenStore, makeRedisSpentTokenStore)
