import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { inject } from "vitest"
import { keys } from "../../src/redis/keys.js"
import { makeRedisConnection, RedisConnection } from "../../src/redis/RedisConnection.js"
import { makeRedisOutboxStore } from "../../src/redis/RedisOutboxStore.js"
import { uniqueId } from "../support/testApp.js"
import { outboxStoreContract, sampleDelivery } from "./OutboxStore.contract.js"

const connection = Layer.scoped(RedisConnection, makeRedisConnection(inject("redisUrl")))

/** Every test gets its own queue in the shared Redis. */
const fresh = Effect.suspend(() => makeRedisOutboxStore(uniqueId("outbox")))

outboxStoreContract("redis", connection, fresh)

layer(connection, { excludeTestServices: true })("RedisOutboxStore layout", (it) => {
  it.effect("keeps a queue's keys under the callgate prefix with the queue's hash tag", () =>
    Effect.gen(function* () {
      const queue = uniqueId("outbox")
      const store = yield* makeRedisOutboxStore(queue)
      const { client } = yield* RedisConnection
      const d = sampleDelivery()
      yield* store.insert(d)
      const found = yield* Effect.promise(() => client.keys(`callgate:outbox:{${queue}}:*`))
      expect(found.sort()).toEqual(
        [
          keys.outboxQueue(queue, "due"),
          keys.outboxQueue(queue, "pending-since"),
          keys.outboxQueue(queue, "seq"),
          `${keys.outboxDeliveryPrefix(queue)}${d.id}`,
          keys.outboxEnvironment(queue, d.agentId, d.environmentId, "deliveries"),
          keys.outboxEnvironment(queue, d.agentId, d.environmentId, "pending")
        ].sort()
      )
      expect(found.every((key) => key.startsWith(`callgate:outbox:{${queue}}:`))).toBe(true)
    }))

  it.effect("a settled delivery expires after the retention period; pending ones never do", () =>
    Effect.gen(function* () {
      const queue = uniqueId("outbox")
      const store = yield* makeRedisOutboxStore(queue)
      const { client } = yield* RedisConnection
      const d = sampleDelivery()
      yield* store.insert(d)
      const record = `${keys.outboxDeliveryPrefix(queue)}${d.id}`
      expect(yield* Effect.promise(() => client.pttl(record))).toBe(-1)
      const claim = (yield* store.claim(d.createdAt, 1000, 1, { perHost: 10, held: new Map() })).claims[0]!
      yield* store.finish(d.id, claim.lease, { ...d, state: "delivered", nextAttemptAt: null })
      const ttl = yield* Effect.promise(() => client.pttl(record))
      expect(ttl).toBeGreaterThan(29 * 24 * 3600 * 1000)
    }))
})
