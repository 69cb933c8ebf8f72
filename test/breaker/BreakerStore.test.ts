import { Effect, Layer } from "effect"
import { Redis } from "ioredis"
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest"
import { BreakerStore } from "../../src/breaker/BreakerStore.js"
import { MemoryBreakerStoreLive } from "../../src/breaker/MemoryBreakerStore.js"
import { RedisBreakerStoreLive } from "../../src/redis/RedisBreakerStore.js"
import { keys } from "../../src/redis/keys.js"
import { makeRedisConnection, RedisConnection } from "../../src/redis/RedisConnection.js"
import { uniqueId } from "../support/testApp.js"
import { breakerStoreContract } from "./BreakerStore.contract.js"

const redisLayer = () =>
  RedisBreakerStoreLive.pipe(Layer.provide(Layer.scoped(RedisConnection, makeRedisConnection(inject("redisUrl")))))

breakerStoreContract("memory", () => MemoryBreakerStoreLive)
breakerStoreContract("redis", redisLayer)

describe("RedisBreakerStore layout", () => {
  let redis: Redis
  beforeAll(() => {
    redis = new Redis(inject("redisUrl"))
  })
  afterAll(() => redis.quit())

  const record = (agentId: string, environmentId: string, sessionId: string, windowSeconds: number) =>
    Effect.runPromise(
      Effect.flatMap(BreakerStore, (store) => store.recordOccurrence(agentId, environmentId, sessionId, windowSeconds)).pipe(
        Effect.provide(redisLayer())
      )
    )

  it("keeps one sorted set per environment under the hash-tagged key, scored with Redis time, expiring after the window", async () => {
    const agentId = uniqueId("agent")
    const environmentId = uniqueId("env")
    const [beforeSeconds, beforeMicros] = await redis.time()
    const redisBefore = Number(beforeSeconds) * 1000 + Math.floor(Number(beforeMicros) / 1000)
    await record(agentId, environmentId, "session-1", 60)
    const key = `callgate:breaker:{${agentId}:${environmentId}}:occurrences`
    expect(keys.breakerOccurrences(agentId, environmentId)).toBe(key)
    const [seconds, micros] = await redis.time()
    const redisNow = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
    const members = await redis.zrange(key, 0, -1, "WITHSCORES")
    expect(members[0]).toBe("session-1")
    // Scored with Redis time taken while the script ran: between two readings of Redis TIME around it.
    expect(Number(members[1])).toBeGreaterThanOrEqual(redisBefore)
    expect(Number(members[1])).toBeLessThanOrEqual(redisNow)
    const ttl = await redis.pttl(key)
    expect(ttl).toBeGreaterThan(60_000)
    expect(ttl).toBeLessThanOrEqual(61_000)
  })

  it("counts on Redis's clock: an entry stamped in the past by another instance ages by Redis time", async () => {
    const agentId = uniqueId("agent")
    const environmentId = uniqueId("env")
    const key = keys.breakerOccurrences(agentId, environmentId)
    const [seconds, micros] = await redis.time()
    const redisNow = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
    // Another instance recorded these 90 s and 30 s ago (by Redis time): only the second is inside
    // the 60 s window, with room for a busy machine's delay before the record below.
    await redis.zadd(key, redisNow - 90_000, "stale", redisNow - 30_000, "recent")
    expect(await record(agentId, environmentId, "mine", 60)).toBe(2)
    expect(await redis.zrange(key, 0, -1)).toEqual(["recent", "mine"])
  })
})
