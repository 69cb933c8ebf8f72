import { Effect, Layer } from "effect"
import { StoreError } from "../kernel/StoreError.js"
import { CallLeaseStore, type LeaseVerdict } from "../sessions/CallLeaseStore.js"
import { RedisConnection, redisCall } from "./RedisConnection.js"
import { redisScript } from "./RedisScript.js"

/** Redis time in ms, and both sets cleared of expired leases; every script starts with this. */
const PRELUDE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
-- A set lives as long as its longest lease (an empty one goes at once).
local function keep(key)
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then redis.call('PEXPIRE', key, math.max(1, tonumber(top[2]) - now)) end
end
`

/**
 * KEYS: calls, outbound. ARGV: session id, kind, total limit (-1: none), outbound limit (-1: none), ttl ms.
 * 1: granted; -1: refused by the total; -2: refused by the outbound limit.
 */
const ACQUIRE = `${PRELUDE}
local ttl = tonumber(ARGV[5])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local total = tonumber(ARGV[3])
  if total >= 0 and redis.call('ZCARD', KEYS[1]) >= total then return -1 end
  local outbound = tonumber(ARGV[4])
  if ARGV[2] == 'outbound' and outbound >= 0 and redis.call('ZCARD', KEYS[2]) >= outbound then return -2 end
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if ARGV[2] == 'outbound' then redis.call('ZADD', KEYS[2], now + ttl, ARGV[1]) end
keep(KEYS[1])
keep(KEYS[2])
return 1
`

/** KEYS: calls, outbound. ARGV: ttl ms, then session ids. Only leases still there are extended (ZADD XX). */
const RENEW = `${PRELUDE}
local ttl = tonumber(ARGV[1])
local expiry = now + ttl
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i])
  redis.call('ZADD', KEYS[2], 'XX', expiry, ARGV[i])
end
keep(KEYS[1])
keep(KEYS[2])
return 1
`

const COUNT = `${PRELUDE}
return { redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]) }
`

const acquireScript = redisScript(ACQUIRE)
const renewScript = redisScript(RENEW)
const countScript = redisScript(COUNT)

/**
 * The fleet's call leases in Redis: two sorted sets under the environment's hash tag (one slot in
 * a Cluster), expiry in Redis time, so a lease no instance renews lapses on its own.
 */
export const makeRedisCallLeaseStore = Effect.gen(function* () {
  const { client, keys } = yield* RedisConnection
  const leaseKeys = (agentId: string, environmentId: string) => [keys.callLeases(agentId, environmentId, "calls"), keys.callLeases(agentId, environmentId, "outbound")]
  return CallLeaseStore.of({
    acquire: ({ agentId, environmentId, sessionId, kind }, limits, ttlMs) =>
      redisCall("callLease.acquire", () =>
        acquireScript(client, leaseKeys(agentId, environmentId), [sessionId, kind, limits.total ?? -1, limits.outbound ?? -1, Math.ceil(ttlMs)])
      ).pipe(
        Effect.flatMap((reply): Effect.Effect<LeaseVerdict, StoreError> => {
          if (reply === 1) return Effect.succeed({ _tag: "Granted" })
          if (reply === -1 && limits.total !== null) return Effect.succeed({ _tag: "Refused", limit: "maxConcurrentCalls", max: limits.total })
          if (reply === -2 && limits.outbound !== null) return Effect.succeed({ _tag: "Refused", limit: "maxConcurrentOutboundCalls", max: limits.outbound })
          return Effect.fail(new StoreError({ operation: "callLease.acquire" }))
        })
      ),
    renew: (agentId, environmentId, held, ttlMs) =>
      held.length === 0
        ? Effect.void
        : redisCall("callLease.renew", () =>
            renewScript(client, leaseKeys(agentId, environmentId), [Math.ceil(ttlMs), ...held.map((lease) => lease.sessionId)])
          ).pipe(Effect.asVoid),
    release: (agentId, environmentId, sessionId) => {
      const [calls, outbound] = leaseKeys(agentId, environmentId)
      return redisCall("callLease.release", () => client.multi().zrem(calls!, sessionId).zrem(outbound!, sessionId).exec()).pipe(Effect.asVoid)
    },
    count: (agentId, environmentId) =>
      redisCall("callLease.count", () => countScript(client, leaseKeys(agentId, environmentId), [])).pipe(
        Effect.map((reply) => {
          const [total, outbound] = reply as [number, number]
          return { total: Number(total), outbound: Number(outbound) }
        })
      )
  })
})

export const RedisCallLeaseStoreLive = Layer.effect(CallLeaseStore, makeRedisCallLeaseStore)
