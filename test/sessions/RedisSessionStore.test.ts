import { expect, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option } from "effect"
import { inject } from "vitest"
import { makeRedisSessionStore } from "../../src/redis/RedisSessionStore.js"
import { SessionStore } from "../../src/sessions/SessionStore.js"
import { keys } from "../../src/redis/keys.js"
import { makeRedisConnection, RedisConnection } from "../../src/redis/RedisConnection.js"
import { uniqueId } from "../support/testApp.js"
import { sampleSession, sessionStoreContract } from "./SessionStore.contract.js"

const connection = Layer.scoped(RedisConnection, makeRedisConnection(inject("redisUrl")))
const store = (retention: Duration.Duration) => Layer.effect(SessionStore, makeRedisSessionStore(retention)).pipe(Layer.provideMerge(connection))

sessionStoreContract("redis", store(Duration.days(30)))

layer(store(Duration.hours(1)), { excludeTestServices: true })("Redis session storage", (it) => {
  it.effect("one agent's session keys share the {agentId} hash tag and expire with the retention", () =>
    Effect.gen(function* () {
      const sessions = yield* SessionStore
      const { client } = yield* RedisConnection
      const agentId = uniqueId("agent")
      const session = sampleSession(agentId)
      yield* sessions.insert(session)
      for (const key of [keys.session(agentId, session.id), keys.agentSessions(agentId), keys.environmentSessions(agentId, session.environmentId)]) {
        expect(key.slice(key.indexOf("{"), key.indexOf("}") + 1)).toBe(`{${agentId}}`)
        const ttl = yield* Effect.promise(() => client.pttl(key))
        expect(ttl).toBeGreaterThan(0)
        expect(ttl).toBeLessThanOrEqual(Duration.toMillis(Duration.hours(1)))
      }
    }))

  it.effect("a checkpoint lives in the session's record hash: it expires with the record, even when saved before it", () =>
    Effect.gen(function* () {
      const sessions = yield* SessionStore
      const { client } = yield* RedisConnection
      const agentId = uniqueId("agent")
      const early = sampleSession(agentId)
      yield* sessions.saveCheckpoint(agentId, early.id, { early: true })
      const key = keys.session(agentId, early.id)
      const ttl = yield* Effect.promise(() => client.pttl(key))
      expect(ttl).toBeGreaterThan(0)
      expect(ttl).toBeLessThanOrEqual(Duration.toMillis(Duration.hours(1)))
      yield* sessions.insert(early)
      expect(yield* Effect.promise(() => client.hget(key, "checkpoint"))).toBe(JSON.stringify({ early: true }))
      // Deleting the record (what its expiry does) takes the checkpoint with it.
      yield* Effect.promise(() => client.del(key))
      expect(Option.isNone(yield* sessions.checkpointOf(agentId, early.id))).toBe(true)
    }))

  it.effect("an index entry whose record expired is skipped and pruned", () =>
    Effect.gen(function* () {
      const sessions = yield* SessionStore
      const { client } = yield* RedisConnection
      const agentId = uniqueId("agent")
      const gone = sampleSession(agentId, { createdAt: new Date(Date.now() - 1000).toISOString() })
      const kept = sampleSession(agentId)
      yield* sessions.insert(gone)
      yield* sessions.insert(kept)
      yield* Effect.promise(() => client.del(keys.session(agentId, gone.id)))
      const page = yield* sessions.list(agentId, { limit: 10 })
      expect(page.items.map((s) => s.id)).toEqual([kept.id])
      expect(yield* Effect.promise(() => client.zscore(keys.agentSessions(agentId), gone.id))).toBeNull()
    }))
})
