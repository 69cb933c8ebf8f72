import { Effect, Layer, Schema } from "effect"
import type { RedisClient as Redis } from "./RedisConnection.js"
import { duplicateClient, RedisConnection, redisCall, subscribeOwn } from "./RedisConnection.js"
import { redisScript } from "./RedisScript.js"
import { BreakerStore, BreakerTrip, LAST_TRIP_RETENTION_SECONDS, type LastTrip } from "../breaker/BreakerStore.js"

/**
 * Record, trim, count and expire in one step, on Redis's clock (`TIME`), so instances with skewed
 * clocks agree on every occurrence's age. One sorted set per environment; ZADD of an existing
 * member only moves its score, so a session counts once and a later expiry refreshes it. Entries
 * whose age exceeds the window (score < now - window) are removed; age exactly the window stays.
 * The key expires a second after the window, when every entry would have aged out anyway.
 */
const RECORD_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - window))
local count = redis.call('ZCARD', KEYS[1])
redis.call('PEXPIRE', KEYS[1], window + 1000)
return count
`

const COUNT_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - tonumber(ARGV[1])))
return redis.call('ZCARD', KEYS[1])
`

/**
 * The window as `count` sees it (expired entries dropped), the newest entry's score and the last
 * trip, read together on Redis's clock. Both keys carry the environment's hash tag (one slot).
 */
const STATE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - tonumber(ARGV[1])))
local count = redis.call('ZCARD', KEYS[1])
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
return { count, newest[2] or false, redis.call('GET', KEYS[2]) }
`

/** Stamps the trip with Redis time, keeps it as the environment's last, and broadcasts the message as given. */
const TRIP_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], string.format('{"at":%d,', now) .. ARGV[1], 'EX', tonumber(ARGV[2]))
return redis.call('PUBLISH', ARGV[3], ARGV[4])
`

const LastTripDoc = Schema.Struct({ at: Schema.Number, sessionId: Schema.String, count: Schema.Number, threshold: Schema.Number })
const decodeLastTrip = Schema.decodeUnknownOption(Schema.parseJson(LastTripDoc))

const recordScript = redisScript(RECORD_SCRIPT)
const countScript = redisScript(COUNT_SCRIPT)
const stateScript = redisScript(STATE_SCRIPT)
const tripScript = redisScript(TRIP_SCRIPT)
/** Drops the window and the probe slot (one slot: both keys carry the environment's hash tag); 1 when a probe slot was held. */
const clearScript = redisScript(`redis.call('DEL', KEYS[1])
return redis.call('DEL', KEYS[2])`)

const decodeTrip = Schema.decodeUnknownOption(Schema.parseJson(BreakerTrip))

export const makeRedisBreakerStore = Effect.gen(function* () {
  const connection = yield* RedisConnection
  const { duplicate, keys } = connection
  // A connection of its own that never queues or replays commands: while Redis is away a command
  // fails at once (the breaker counts locally), and one given up on is never run later (a
  // stale DEL would wipe newer occurrences, a stale record would outlive its window).
  const client = yield* Effect.acquireRelease(
    Effect.sync(() => {
      const own = duplicateClient(connection.client, {
        connectionName: "callgate-breaker",
        enableOfflineQueue: false,
        autoResendUnfulfilledCommands: false
      })
      own.on("error", () => {})
      return own
    }),
    (own) => Effect.promise(() => own.quit().catch(() => own.disconnect()))
  )
  // Without an offline queue, commands sent before the connection is up would fail: wait for it,
  // but not for long (a Redis that is down at start only means counting locally for a while).
  yield* Effect.async<void>((resume) => {
    if (client.status === "ready") return resume(Effect.void)
    const ready = () => resume(Effect.void)
    client.once("ready", ready)
    return Effect.sync(() => void client.off("ready", ready))
  }).pipe(Effect.timeout("2 seconds"), Effect.ignore)
  const windowMs = (seconds: number) => String(Math.round(seconds * 1000))

  return BreakerStore.of({
    recordOccurrence: (agentId, environmentId, sessionId, windowSeconds) =>
      redisCall("breaker.recordOccurrence", () =>
        recordScript(client, [keys.breakerOccurrences(agentId, environmentId)], [sessionId, windowMs(windowSeconds)]) as Promise<number>
      ),
    count: (agentId, environmentId, windowSeconds) =>
      redisCall("breaker.count", () =>
        countScript(client, [keys.breakerOccurrences(agentId, environmentId)], [windowMs(windowSeconds)]) as Promise<number>
      ),
    state: (agentId, environmentId, windowSeconds) =>
      redisCall("breaker.state", () =>
        stateScript(
          client,
          [keys.breakerOccurrences(agentId, environmentId), keys.breakerLastTrip(agentId, environmentId)],
          [windowMs(windowSeconds)]
        )
      ).pipe(
        Effect.map((reply) => {
          const [count, newest, lastTrip] = reply as [number, string | null, string | null]
          const decoded = typeof lastTrip === "string" ? decodeLastTrip(lastTrip) : undefined
          return {
            occurrences: count,
            newestAt: typeof newest === "string" ? Number(newest) : null,
            lastTrip: decoded !== undefined && decoded._tag === "Some" ? (decoded.value satisfies LastTrip) : null
          }
        })
      ),
    claimProbe: (agentId, environmentId, sessionId, intervalSeconds) =>
      redisCall("breaker.claimProbe", () =>
        client.set(keys.breakerProbe(agentId, environmentId), sessionId, "PX", Math.max(1, Math.round(intervalSeconds * 1000)), "NX")
      ).pipe(Effect.map((reply) => reply === "OK")),
    probe: (agentId, environmentId) => redisCall("breaker.probe", () => client.get(keys.breakerProbe(agentId, environmentId))),
    clear: (agentId, environmentId) =>
      redisCall("breaker.clear", () =>
        clearScript(client, [keys.breakerOccurrences(agentId, environmentId), keys.breakerProbe(agentId, environmentId)], [])
      ).pipe(Effect.map((probeDeleted) => probeDeleted === 1)),
    publishTrip: (trip) =>
      redisCall("breaker.publishTrip", () =>
        tripScript(
          client,
          [keys.breakerLastTrip(trip.agentId, trip.environmentId)],
          [
            // The rest of the last-trip document after the script's `{"at":<ms>,`.
            JSON.stringify({ sessionId: trip.sessionId, count: trip.count, threshold: trip.threshold }).slice(1),
            String(LAST_TRIP_RETENTION_SECONDS),
            keys.breakerTripsChannel,
            JSON.stringify(trip)
          ]
        )
      ).pipe(Effect.asVoid),
    subscribeTrips: (handler) =>
      subscribeOwn(duplicate, "breaker.subscribeTrips", keys.breakerTripsChannel, (message) => {
        const trip = decodeTrip(message)
        if (trip._tag === "Some") handler(trip.value)
      }),
    ping: redisCall("breaker.ping", () => client.ping()).pipe(Effect.asVoid)
  })
})

export const RedisBreakerStoreLive = Layer.scoped(BreakerStore, makeRedisBreakerStore)
