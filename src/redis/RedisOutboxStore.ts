import { Effect, Layer, Option, Schema } from "effect"
import { RedisConnection, redisCall } from "./RedisConnection.js"
import { redisScript } from "./RedisScript.js"
import { StoreError } from "../kernel/StoreError.js"
import { hostOf, type StoredDelivery, StoredDelivery as StoredDeliverySchema } from "../webhooks/Delivery.js"
import { type Claim, OutboxStore, SETTLED_RETENTION_MS } from "../webhooks/OutboxStore.js"

/**
 * The outbox in Redis. A delivery is a hash (`meta` JSON for what never changes, one field per
 * changing one, `lease` the token counter, `cancel` a pending cancellation). A queue has a `due`
 * sorted set (score: due time; member `<host> <id>`, so a claim can skip hosts at capacity without
 * reading their records) and a `leases` sorted set (score: lease expiry, member id); Lua scripts move
 * deliveries between them atomically, so a delivery is always in exactly one of due, leases, or
 * neither (settled). Per environment, `deliveries` (score: a queue-wide sequence) orders the log
 * and `pending` lets removal of the webhook find what to cancel.
 */

const fields = (d: StoredDelivery): Array<string> => [
  "state",
  d.state,
  "updatedAt",
  String(d.updatedAt),
  "nextAttemptAt",
  d.nextAttemptAt === null ? "" : String(d.nextAttemptAt),
  "retriesUsed",
  String(d.retriesUsed),
  "automaticRetries",
  d.automaticRetries ? "1" : "0",
  "reason",
  d.reason ?? "",
  "attempts",
  JSON.stringify(d.attempts)
]

const meta = (d: StoredDelivery) =>
  JSON.stringify({
    id: d.id,
    event: d.event,
    agentId: d.agentId,
    environmentId: d.environmentId,
    sessionId: d.sessionId,
    body: d.body,
    url: d.url,
    createdAt: d.createdAt
  })

const validate = Schema.decodeUnknownSync(StoredDeliverySchema)

/** A delivery from its hash (HGETALL as an object or as a flat array from Lua), validated once. */
const fromHash = (hash: Record<string, string> | ReadonlyArray<string>): StoredDelivery => {
  let h: Record<string, string>
  if (Array.isArray(hash)) {
    h = {}
    for (let i = 0; i + 1 < hash.length; i += 2) h[hash[i]!] = hash[i + 1]!
  } else {
    h = hash as Record<string, string>
  }
  const meta = JSON.parse(h.meta ?? "null") as Record<string, unknown>
  return validate({
    id: meta.id,
    event: meta.event,
    agentId: meta.agentId,
    environmentId: meta.environmentId,
    sessionId: meta.sessionId,
    body: meta.body,
    url: meta.url,
    createdAt: meta.createdAt,
    state: h.state,
    updatedAt: Number(h.updatedAt),
    nextAttemptAt: h.nextAttemptAt ? Number(h.nextAttemptAt) : null,
    retriesUsed: Number(h.retriesUsed),
    automaticRetries: h.automaticRetries === "1",
    reason: h.reason ? h.reason : null,
    attempts: JSON.parse(h.attempts ?? "null")
  })
}

const INSERT = `
if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[4], 'lease', 0, 'host', ARGV[5], unpack(ARGV, 6))
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[5] .. ' ' .. ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[5], seq, ARGV[1])
redis.call('SADD', KEYS[6], ARGV[1])
local size = redis.call('ZCARD', KEYS[5])
local cap = tonumber(ARGV[4])
if size > cap then redis.call('ZREMRANGEBYRANK', KEYS[5], 0, size - cap - 1) end
return seq
`

const CLAIM = `
local now = tonumber(ARGV[1])
local expiry = now + tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local perHost = tonumber(ARGV[5])
local held = {}
for i = 6, #ARGV - 1, 2 do held[ARGV[i]] = tonumber(ARGV[i + 1]) end
local out = {}
local function take(id, key, host)
  held[host] = (held[host] or 0) + 1
  local lease = redis.call('HINCRBY', key, 'lease', 1)
  redis.call('ZADD', KEYS[2], expiry, id)
  out[#out + 1] = { id, tostring(lease), redis.call('HGETALL', key) }
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)) do
  local key = ARGV[4] .. id
  local host = redis.call('HGET', key, 'host')
  if host then take(id, key, host) else redis.call('ZREM', KEYS[2], id) end
end
if #out < limit then
  -- Look a little past what fits, so deliveries of hosts at capacity do not hide the others.
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit * 4)) do
    if #out >= limit then break end
    local space = string.find(member, ' ', 1, true)
    local host = string.sub(member, 1, space - 1)
    if (held[host] or 0) < perHost then
      local id = string.sub(member, space + 1)
      local key = ARGV[4] .. id
      redis.call('ZREM', KEYS[1], member)
      if redis.call('EXISTS', key) == 1 then take(id, key, host) end
    end
  end
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return { first[2] or '', out }
`

const HOLDS = `
local function holds(leases, key, id, lease)
  return redis.call('ZSCORE', leases, id) and redis.call('HGET', key, 'lease') == lease
end
local function dueMember(key, id)
  return (redis.call('HGET', key, 'host') or '') .. ' ' .. id
end
`

const RENEW = `${HOLDS}
if not holds(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
`

const RELEASE = `${HOLDS}
if not holds(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'lease', 1)
redis.call('ZADD', KEYS[3], ARGV[3], dueMember(KEYS[2], ARGV[1]))
return 1
`

const FINISH = `${HOLDS}
if not holds(KEYS[1], KEYS[4], ARGV[1], ARGV[2]) then return { 0 } end
if ARGV[4] == 'pending' then
  local cancel = redis.call('HGET', KEYS[4], 'cancel')
  if cancel then return { 2, cancel } end
end
redis.call('HSET', KEYS[4], unpack(ARGV, 6))
redis.call('HINCRBY', KEYS[4], 'lease', 1)
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[4] == 'pending' then
  redis.call('ZADD', KEYS[2], ARGV[5], dueMember(KEYS[4], ARGV[1]))
else
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('SREM', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[4], 'cancel')
  redis.call('PEXPIRE', KEYS[4], ARGV[3])
end
return { 1 }
`

const CANCEL = `
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  local key = ARGV[3] .. id
  if redis.call('ZSCORE', KEYS[2], id) then
    redis.call('HSET', key, 'cancel', ARGV[1])
  else
    redis.call('ZREM', KEYS[1], (redis.call('HGET', key, 'host') or '') .. ' ' .. id)
    if redis.call('HGET', key, 'state') == 'pending' then
      redis.call('HSET', key, 'state', 'cancelled', 'reason', ARGV[1], 'updatedAt', ARGV[2], 'nextAttemptAt', '')
      redis.call('HINCRBY', key, 'lease', 1)
      redis.call('PEXPIRE', key, ARGV[4])
      out[#out + 1] = id
    end
    redis.call('ZREM', KEYS[3], id)
    redis.call('SREM', KEYS[4], id)
  end
end
return out
`

const REQUEUE = `
if redis.call('EXISTS', KEYS[4]) == 0 then return 0 end
local member = (redis.call('HGET', KEYS[4], 'host') or '') .. ' ' .. ARGV[1]
if redis.call('ZSCORE', KEYS[1], member) or redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 2 end
redis.call('HSET', KEYS[4], unpack(ARGV, 4))
redis.call('HDEL', KEYS[4], 'cancel')
redis.call('PERSIST', KEYS[4])
redis.call('ZADD', KEYS[1], ARGV[2], member)
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('SADD', KEYS[5], ARGV[1])
return 1
`

/** The log keeps this many deliveries per environment (settled ones also expire after retention). */
const LOG_CAP = 10_000

const insertScript = redisScript(INSERT)
const claimScript = redisScript(CLAIM)
const renewScript = redisScript(RENEW)
const releaseScript = redisScript(RELEASE)
const finishScript = redisScript(FINISH)
const cancelScript = redisScript(CANCEL)
const requeueScript = redisScript(REQUEUE)

const decodeOrFail = <A>(operation: string, decode: () => A) =>
  Effect.try({ try: decode, catch: (cause) => new StoreError({ operation, cause }) })

/** `queue` names an independent outbox in the same Redis (tests run several side by side). */
export const makeRedisOutboxStore = (queue = "outbox") =>
  Effect.gen(function* () {
    const { client, keys, replicated } = yield* RedisConnection
    const due = keys.outboxQueue(queue, "due")
    const leases = keys.outboxQueue(queue, "leases")
    const pendingSince = keys.outboxQueue(queue, "pending-since")
    const seq = keys.outboxQueue(queue, "seq")
    const prefix = keys.outboxDeliveryPrefix(queue)
    const record = (id: string) => `${prefix}${id}`
    const envKey = (agentId: string, environmentId: string, part: "deliveries" | "pending") =>
      keys.outboxEnvironment(queue, agentId, environmentId, part)

    const read = (id: string) =>
      redisCall("outbox.get", () => client.hgetall(record(id))).pipe(
        Effect.flatMap((hash) =>
          hash.meta === undefined
            ? Effect.succeed(Option.none<StoredDelivery>())
            : decodeOrFail("outbox.get", () => Option.some(fromHash(hash)))
        )
      )

    const get = (agentId: string, environmentId: string, id: string) =>
      read(id).pipe(Effect.map(Option.filter((d) => d.agentId === agentId && d.environmentId === environmentId)))

    return OutboxStore.of({
      insert: (d) =>
        redisCall("outbox.insert", () =>
          insertScript(
            client,
            [due, pendingSince, seq, record(d.id), envKey(d.agentId, d.environmentId, "deliveries"), envKey(d.agentId, d.environmentId, "pending")],
            [d.id, d.nextAttemptAt ?? d.createdAt, d.createdAt, LOG_CAP, hostOf(d.url), "meta", meta(d), ...fields(d)]
          )
        ).pipe(Effect.zipRight(replicated(record(d.id), "outbox.insert"))),

      get,

      list: (agentId, environmentId, page) =>
        Effect.gen(function* () {
          const index = envKey(agentId, environmentId, "deliveries")
          const max = page.before === undefined ? "+inf" : `(${page.before}`
          const flat = yield* redisCall("outbox.list", () =>
            client.zrevrangebyscore(index, max, "-inf", "WITHSCORES", "LIMIT", 0, page.limit + 1)
          )
          const items: Array<{ id: string; seq: number }> = []
          for (let i = 0; i + 1 < flat.length; i += 2) items.push({ id: flat[i]!, seq: Number(flat[i + 1]) })
          const shown = items.slice(0, page.limit)
          const found = yield* Effect.forEach(shown, (item) => read(item.id), { concurrency: "unbounded" })
          // Settled deliveries past retention have expired; their index entries go lazily.
          const gone = shown.filter((_, i) => Option.isNone(found[i]!)).map((item) => item.id)
          if (gone.length > 0) yield* redisCall("outbox.list", () => client.zrem(index, ...gone))
          return {
            deliveries: found.flatMap((d) => (Option.isSome(d) ? [d.value] : [])),
            next: items.length > page.limit ? Option.some(shown[shown.length - 1]!.seq) : Option.none()
          }
        }),

      claim: (now, leaseMs, limit, capacity) =>
        redisCall("outbox.claim", () =>
          claimScript(client, [due, leases], [now, leaseMs, limit, prefix, capacity.perHost, ...[...capacity.held].flat()])
        ).pipe(
          Effect.flatMap((reply) =>
            decodeOrFail("outbox.claim", () => {
              const [first, taken] = reply as [string, Array<[string, string, Array<string>]>]
              const claims: Array<Claim> = taken.map(([, lease, hash]) => ({ delivery: fromHash(hash), lease }))
              return { claims, nextDueAt: first === "" ? Option.none() : Option.some(Number(first)) }
            })
          )
        ),

      renew: (id, lease, until) =>
        redisCall("outbox.renew", () => renewScript(client, [leases, record(id)], [id, lease, until])).pipe(Effect.map((n) => n === 1)),

      release: (id, lease, dueAt) =>
        redisCall("outbox.release", () => releaseScript(client, [leases, record(id), due], [id, lease, dueAt])).pipe(
          Effect.map((n) => n === 1)
        ),

      finish: (id, lease, next) =>
        redisCall("outbox.finish", () =>
          finishScript(
            client,
            [leases, due, pendingSince, record(id), envKey(next.agentId, next.environmentId, "pending")],
            [id, lease, SETTLED_RETENTION_MS, next.state, next.nextAttemptAt ?? next.updatedAt, ...fields(next)]
          )
        ).pipe(
          Effect.map((reply) => {
            const [code, reason] = reply as [number, string | undefined]
            if (code === 1) return { _tag: "Written" } as const
            if (code === 2) return { _tag: "CancelRequested", reason: reason ?? "cancelled" } as const
            return { _tag: "LeaseLost" } as const
          }),
          // A settled delivery whose settling a failover lost would be sent again: it waits for the replicas too.
          Effect.tap((result) => (result._tag === "Written" && next.state !== "pending" ? replicated(record(id), "outbox.finish") : Effect.void))
        ),

      cancelPending: (agentId, environmentId, reason, now) =>
        redisCall("outbox.cancel", () =>
          cancelScript(client, [due, leases, pendingSince, envKey(agentId, environmentId, "pending")], [reason, now, prefix, SETTLED_RETENTION_MS])
        ).pipe(Effect.map((ids) => ids as Array<string>)),

      requeue: (agentId, environmentId, id, update) =>
        Effect.gen(function* () {
          const current = yield* get(agentId, environmentId, id)
          if (Option.isNone(current)) return { _tag: "NotFound" } as const
          const next = update(current.value)
          const code = yield* redisCall("outbox.requeue", () =>
            requeueScript(
              client,
              [due, leases, pendingSince, record(id), envKey(agentId, environmentId, "pending")],
              [id, next.nextAttemptAt ?? next.updatedAt, next.updatedAt, ...fields(next)]
            )
          )
          if (code === 0) return { _tag: "NotFound" } as const
          if (code === 2) return { _tag: "AlreadyPending" } as const
          return { _tag: "Requeued", delivery: next } as const
        }),

      stats: Effect.gen(function* () {
        const [dueCount, leasedCount, oldest] = yield* redisCall("outbox.stats", () =>
          Promise.all([client.zcard(due), client.zcard(leases), client.zrange(pendingSince, 0, 0, "WITHSCORES")])
        )
        return {
          depth: dueCount + leasedCount,
          oldestPendingSince: oldest[1] === undefined ? Option.none() : Option.some(Number(oldest[1]))
        }
      })
    })
  })

export const RedisOutboxStoreLive = Layer.effect(OutboxStore, makeRedisOutboxStore())
