import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Layer } from "effect"
import { Redis } from "ioredis"
import { inject } from "vitest"
import { Breaker, type BreakerSettings } from "../../src/breaker/Breaker.js"
import { BreakerStore, type BreakerTrip } from "../../src/breaker/BreakerStore.js"
import { RedisBreakerStoreLive } from "../../src/redis/RedisBreakerStore.js"
import type { NoResponseTrip } from "../../src/breaker/ResponseWatchdog.js"
import { keys } from "../../src/redis/keys.js"
import { makeRedisConnection, RedisConnection } from "../../src/redis/RedisConnection.js"
import { freePort, startRedisServer } from "../support/redisServer.js"
import { breakerLayer, captureLogs, newEnvironment, sessionOf, watch } from "./breakerTestLayer.js"

/** Real Redis, real time: the shared window across instances, and life without Redis. */

const redisStore = (url: string) => RedisBreakerStoreLive.pipe(Layer.provide(Layer.scoped(RedisConnection, makeRedisConnection(url))))

/** How the breaker's calls to record an occurrence in the store went: started, answered by Redis, failed, given up (interrupted). */
interface StoreCalls {
  started: number
  answered: number
  failed: number
  givenUp: number
}

/** The Redis store, with its recordOccurrence calls counted by outcome. */
const observedStore = (url: string, calls: StoreCalls) =>
  Layer.effect(
    BreakerStore,
    Effect.map(BreakerStore, (store) =>
      BreakerStore.of({
        ...store,
        recordOccurrence: (...args) =>
          Effect.suspend(() => {
            calls.started++
            return store.recordOccurrence(...args).pipe(
              Effect.onExit((exit) =>
                Effect.sync(() => {
                  if (Exit.isSuccess(exit)) calls.answered++
                  else if (Exit.isInterrupted(exit)) calls.givenUp++
                  else calls.failed++
                })
              )
            )
          })
      })
    )
  ).pipe(Layer.provide(redisStore(url)))
const noCalls = (): StoreCalls => ({ started: 0, answered: 0, failed: 0, givenUp: 0 })

const settings: BreakerSettings = { timeoutSeconds: 5, threshold: 5, windowSeconds: 300 }

const zcard = (url: string, env: { agentId: string; environmentId: string }) =>
  Effect.acquireUseRelease(
    Effect.sync(() => new Redis(url)),
    (redis) => Effect.promise(() => redis.zcard(keys.breakerOccurrences(env.agentId, env.environmentId))),
    (redis) => Effect.promise(() => redis.quit())
  )

const waitUntil = (check: Effect.Effect<boolean>, timeoutMs: number) =>
  Effect.gen(function* () {
    const deadline = Date.now() + timeoutMs
    while (!(yield* check)) {
      if (Date.now() > deadline) return false
      yield* Effect.sleep("50 millis")
    }
    return true
  })

describe("Breaker on Redis", () => {
  it.scopedLive("falls back to a local window when Redis goes down, warns once, and returns when it is back", () =>
    Effect.gen(function* () {
      const server = yield* Effect.acquireRelease(
        Effect.promise(() => startRedisServer()),
        (s) => Effect.promise(() => s.stop())
      )
      const logs: Array<{ level: string; message: string }> = []
      const calls = noCalls()
      const context = yield* Layer.build(
        breakerLayer(observedStore(server.url, calls), { BREAKER_STORE_TIMEOUT: "200ms" }, captureLogs(logs))
      )
      const breaker = yield* Effect.provide(Breaker, context)
      const env = newEnvironment()
      const breakerLogs = (level: string) =>
        logs.filter((line) => line.level === level && line.message.startsWith("breaker")).map((line) => line.message)

      expect((yield* breaker.recordTimeout(sessionOf(env, "s1"), settings)).count).toBe(1)
      expect(yield* zcard(server.url, env)).toBe(1)

      yield* Effect.promise(() => server.stop())
      const before = { ...calls }
      const down = yield* breaker.recordTimeout(sessionOf(env, "s2"), settings)
      // The breaker gave up on Redis (the call failed or was cut at the store timeout) and counted locally.
      expect(calls.started).toBe(before.started + 1)
      expect(calls.answered).toBe(before.answered)
      expect(calls.failed + calls.givenUp).toBe(before.failed + before.givenUp + 1)
      expect(down).toEqual({ count: 1, tripped: false })
      expect(yield* breaker.isDegraded).toBe(true)
      // While degraded, nothing waits for Redis: it is not even asked.
      const degraded = calls.started
      expect((yield* breaker.recordTimeout(sessionOf(env, "s3"), settings)).count).toBe(2)
      expect((yield* breaker.recordTimeout(sessionOf(env, "s4"), settings)).count).toBe(3)
      expect(calls.started).toBe(degraded)
      yield* breaker.recordResponse(env.agentId, env.environmentId)
      expect(yield* breaker.count(env.agentId, env.environmentId, 300)).toBe(0)
      expect(breakerLogs("WARN")).toEqual([
        "breaker store unreachable or slow: counting occurrences on this instance until it is back"
      ])

      const restarted = yield* Effect.acquireRelease(
        Effect.promise(() => startRedisServer(server.port)),
        (s) => Effect.promise(() => s.stop())
      )
      expect(yield* waitUntil(Effect.map(breaker.isDegraded, (d) => !d), 30_000)).toBe(true)
      expect(breakerLogs("INFO")).toEqual([
        "breaker store reachable again: counting in the shared window"
      ])
      expect((yield* breaker.recordTimeout(sessionOf(env, "s5"), settings)).count).toBe(1)
      expect(yield* zcard(restarted.url, env)).toBe(1)
      expect(breakerLogs("WARN")).toHaveLength(1)
    }))

  it.scopedLive("starts without Redis, counts locally, and joins the shared window and trip channel once Redis is up", () =>
    Effect.gen(function* () {
      const port = yield* Effect.promise(() => freePort())
      const url = `redis://127.0.0.1:${port}`
      // The build waits for Redis only as long as the store's and the trip subscription's bounded
      // waits (2 s each): it completes although nothing listens on the port.
      const context = yield* Layer.build(breakerLayer(redisStore(url), { BREAKER_STORE_TIMEOUT: "200ms" }))
      const breaker = yield* Effect.provide(Breaker, context)
      const env = newEnvironment()
      expect((yield* breaker.recordTimeout(sessionOf(env, "s1"), settings)).count).toBe(1)
      expect(yield* breaker.isDegraded).toBe(true)

      const server = yield* Effect.acquireRelease(
        Effect.promise(() => startRedisServer(port)),
        (s) => Effect.promise(() => s.stop())
      )
      expect(yield* waitUntil(Effect.map(breaker.isDegraded, (d) => !d), 30_000)).toBe(true)
      expect((yield* breaker.recordTimeout(sessionOf(env, "s2"), settings)).count).toBe(1)
      expect(yield* zcard(server.url, env)).toBe(1)

      // The trip subscription was retried in the background: a trip from another instance arrives.
      const heard = yield* Deferred.make<BreakerTrip>()
      yield* breaker.subscribeTrips(env.agentId, env.environmentId, (trip) => Deferred.unsafeDone(heard, Effect.succeed(trip)))
      const publisher = yield* Effect.acquireRelease(
        Effect.sync(() => new Redis(server.url)),
        (redis) => Effect.promise(() => redis.quit())
      )
      const trip: BreakerTrip = { ...env, sessionId: "elsewhere", count: 5, threshold: 5, origin: "another-instance" }
      const delivered = yield* Effect.promise(() => publisher.publish(keys.breakerTripsChannel, JSON.stringify(trip))).pipe(
        Effect.zipRight(Deferred.await(heard)),
        Effect.timeout("500 millis"),
        Effect.retry({ times: 10 })
      )
      expect(delivered).toEqual(trip)
    }))

  it.scopedLive("falls back when Redis is slow rather than waiting for it", () =>
    Effect.gen(function* () {
      const server = yield* Effect.acquireRelease(
        Effect.promise(() => startRedisServer()),
        (s) => Effect.promise(() => s.stop())
      )
      const calls = noCalls()
      const context = yield* Layer.build(breakerLayer(observedStore(server.url, calls), { BREAKER_STORE_TIMEOUT: "200ms" }))
      const breaker = yield* Effect.provide(Breaker, context)
      const env = newEnvironment()
      const admin = yield* Effect.acquireRelease(
        Effect.sync(() => new Redis(server.url)),
        (redis) => Effect.promise(() => redis.quit())
      )
      yield* Effect.promise(() => admin.call("CLIENT", "PAUSE", "3000", "ALL"))
      expect((yield* breaker.recordTimeout(sessionOf(env, "s1"), settings)).count).toBe(1)
      // It answered from the local window while Redis still held its call: the call was given up, not answered.
      expect(calls).toEqual({ started: 1, answered: 0, failed: 0, givenUp: 1 })
      expect(yield* breaker.isDegraded).toBe(true)
      expect(yield* waitUntil(Effect.map(breaker.isDegraded, (d) => !d), 30_000)).toBe(true)
    }))

  it.scopedLive("two instances on one Redis share one threshold, and the trip rescues the stalled calls on both, not one still within its deadline", () =>
    Effect.gen(function* () {
      const url = inject("redisUrl")
      const instanceA = yield* Layer.build(breakerLayer(redisStore(url)))
      const instanceB = yield* Layer.build(breakerLayer(redisStore(url)))
      const env = newEnvironment()
      const shared: BreakerSettings = { timeoutSeconds: 1, threshold: 3, windowSeconds: 60 }
      const rescues: Array<NoResponseTrip & { sessionId: string; at: number }> = []
      const on = (context: typeof instanceA, sessionId: string) =>
        watch(sessionOf(env, sessionId), Effect.succeed(shared), [], {}, (trip) => void rescues.push({ ...trip, sessionId, at: performance.now() })).pipe(
          Effect.provide(context)
        )

      const a1 = yield* on(instanceA, "a1")
      const a2 = yield* on(instanceA, "a2")
      const b1 = yield* on(instanceB, "b1")
      const b2 = yield* on(instanceB, "b2")
      a1.turnEnded(0, 0)
      a2.turnEnded(0, 0)
      yield* Effect.sleep("300 millis")
      b1.turnEnded(0, 0) // expires 300 ms after the a's: the third occurrence
      yield* Effect.sleep("900 millis")
      b2.turnEnded(0, 0) // within its deadline when the breaker trips
      // b2 is rescued too, but only at its own deadline, by its own occurrence (the fourth): the
      // trip found it within its deadline and left it alone.
      expect(yield* waitUntil(Effect.sync(() => rescues.some((r) => r.sessionId === "b2")), 30_000)).toBe(true)

      const trip = rescues.find((r) => r.sessionId === "b1")!
      expect(trip).toMatchObject({ reason: "threshold", count: 3, threshold: 3, trippedBy: "b1" })
      // The a's were rescued by that trip, heard through Redis on the other instance: before their
      // own next expiry, which would have found 3 occurrences and tripped for themselves.
      expect(rescues.filter((r) => r.sessionId.startsWith("a")).map((r) => [r.sessionId, r.reason, r.trippedBy]).sort()).toEqual([
        ["a1", "environment", "b1"],
        ["a2", "environment", "b1"]
      ])
      expect(rescues.find((r) => r.sessionId === "b2")).toMatchObject({ reason: "threshold", trippedBy: "b2" })
      expect(rescues.map((r) => r.sessionId).indexOf("b2")).toBe(3)
      expect(b2.rescued).toBe(true)
    }))

  it.scopedLive("two instances on one Redis share the breaker's state: a trip on A sheds on B, one probe per interval across both, an answer on A closes it for B", () =>
    Effect.gen(function* () {
      const url = inject("redisUrl")
      const instanceA = yield* Layer.build(breakerLayer(redisStore(url), { BREAKER_PROBE_INTERVAL: "1h" }))
      const instanceB = yield* Layer.build(breakerLayer(redisStore(url), { BREAKER_PROBE_INTERVAL: "1h" }))
      const env = newEnvironment()
      const settings: BreakerSettings = { timeoutSeconds: 1, threshold: 3, windowSeconds: 60 }
      const on = <A, E>(context: typeof instanceA, use: (breaker: Breaker) => Effect.Effect<A, E>) => Effect.flatMap(Breaker, use).pipe(Effect.provide(context))

      expect(yield* on(instanceB, (b) => b.decideEntry(sessionOf(env, "n0"), settings))).toBe("admit")
      for (const id of ["s1", "s2", "s3"]) yield* on(instanceA, (b) => b.recordTimeout(sessionOf(env, id), settings))
      expect(yield* on(instanceB, (b) => b.stateOf(env.agentId, env.environmentId, settings))).toBe("open")
      // One probe across both instances, whichever takes the entry; every other call is shed.
      const decisions = [
        yield* on(instanceB, (b) => b.decideEntry(sessionOf(env, "n1"), settings)),
        yield* on(instanceA, (b) => b.decideEntry(sessionOf(env, "n2"), settings)),
        yield* on(instanceB, (b) => b.decideEntry(sessionOf(env, "n3"), settings))
      ]
      expect(decisions).toEqual(["probe", "shed", "shed"])
      expect(yield* on(instanceA, (b) => b.stateOf(env.agentId, env.environmentId, settings))).toBe("probing")
      // The probe's agent answers (on A): closed for both.
      yield* on(instanceA, (b) => b.recordResponse(env.agentId, env.environmentId))
      expect(yield* on(instanceB, (b) => b.stateOf(env.agentId, env.environmentId, settings))).toBe("closed")
      expect(yield* on(instanceB, (b) => b.decideEntry(sessionOf(env, "n4"), settings))).toBe("admit")
    }))
})
