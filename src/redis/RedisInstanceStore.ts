import { Effect, Layer, Option, Schema } from "effect"
import { StoreError } from "../kernel/StoreError.js"
import { type InstanceEntry, InstanceStore } from "../fleet/InstanceStore.js"
import { RedisConnection, redisCall } from "./RedisConnection.js"
import { redisScript } from "./RedisScript.js"
import { isoAt } from "../kernel/Time.js"


const NOW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

/** Entries of instances silent this many times the gone-after period are pruned. */
const PRUNE_FACTOR = 6

/** Placement keys of an environment no instance publishes any more expire after this. */
const ENVIRONMENT_KEYS_TTL_MS = 3_600_000

/** KEYS records, seen. ARGV id, JSON, goneAfterMs. */
const REPORT_SCRIPT = `${NOW}
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now, ARGV[1])
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%d', now - tonumber(ARGV[3]) * ${PRUNE_FACTOR}))
for _, id in ipairs(stale) do
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
end
return 1
`

/** KEYS seen. ARGV goneAfterMs. Ids of instances silent for longer than that (not yet pruned). */
const SILENT_SCRIPT = `${NOW}
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now - tonumber(ARGV[1])))
`

/** KEYS records, seen. ARGV goneAfterMs. Flat: id, seen, JSON, ... of live instances. */
const LIST_SCRIPT = `${NOW}
local live = redis.call('ZRANGEBYSCORE', KEYS[2], string.format('%d', now - tonumber(ARGV[1])), '+inf', 'WITHSCORES')
local out = {}
for i = 1, #live, 2 do
  local doc = redis.call('HGET', KEYS[1], live[i])
  if doc then
    table.insert(out, live[i])
    table.insert(out, live[i + 1])
    table.insert(out, doc)
  end
end
return out
`

/** KEYS idle, seen, held. ARGV instance, socket... Replaces the instance's sockets, prunes silent instances. */
const PUBLISH_SCRIPT = `${NOW}
local instance = ARGV[1]
local keep = {}
for i = 2, #ARGV do keep[ARGV[i]] = true end
local idle = redis.call('HGETALL', KEYS[1])
for i = 1, #idle, 2 do
  if idle[i + 1] == instance and not keep[idle[i]] then redis.call('HDEL', KEYS[1], idle[i]) end
end
for i = 2, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], instance) end
redis.call('HSET', KEYS[2], instance, now)
local seen = redis.call('HGETALL', KEYS[2])
local silent = {}
for i = 1, #seen, 2 do
  if now - tonumber(seen[i + 1]) > ${ENVIRONMENT_KEYS_TTL_MS / 60} then silent[seen[i]] = true end
end
if next(silent) ~= nil then
  idle = redis.call('HGETALL', KEYS[1])
  for i = 1, #idle, 2 do
    if silent[idle[i + 1]] then redis.call('HDEL', KEYS[1], idle[i]) end
  end
  for id, _ in pairs(silent) do redis.call('HDEL', KEYS[2], id) end
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ${ENVIRONMENT_KEYS_TTL_MS}) end
return 1
`

/**
 * KEYS idle, seen, held. ARGV preferred, holdMs, goneAfterMs, avoid. Holds one free socket of a live
 * instance other than `avoid` (preferred first, else the one with the most free sockets, ties by
 * id): {instance, socket}.
 */
const RESERVE_SCRIPT = `${NOW}
local preferred = ARGV[1]
local gone = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local held = {}
local holds = redis.call('ZRANGE', KEYS[3], 0, -1)
for _, socket in ipairs(holds) do held[socket] = true end
local alive = {}
local seen = redis.call('HGETALL', KEYS[2])
for i = 1, #seen, 2 do
  if seen[i] ~= ARGV[4] and now - tonumber(seen[i + 1]) <= gone then alive[seen[i]] = true end
end
local free = {}
local idle = redis.call('HGETALL', KEYS[1])
for i = 1, #idle, 2 do
  local socket, owner = idle[i], idle[i + 1]
  if alive[owner] and not held[socket] then
    if free[owner] == nil then free[owner] = {} end
    table.insert(free[owner], socket)
  end
end
local chosen = nil
if free[preferred] ~= nil then
  chosen = preferred
else
  local most = 0
  for owner, sockets in pairs(free) do
    if #sockets > most or (#sockets == most and chosen ~= nil and owner < chosen) then
      most = #sockets
      chosen = owner
    end
  end
end
if chosen == nil then return false end
table.sort(free[chosen])
local socket = free[chosen][1]
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), socket)
redis.call('PEXPIRE', KEYS[3], ${ENVIRONMENT_KEYS_TTL_MS})
return { chosen, socket }
`

/** KEYS idle, seen. ARGV instance. */
const WITHDRAW_ENV_SCRIPT = `
local idle = redis.call('HGETALL', KEYS[1])
for i = 1, #idle, 2 do
  if idle[i + 1] == ARGV[1] then redis.call('HDEL', KEYS[1], idle[i]) end
end
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
`

const reportScript = redisScript(REPORT_SCRIPT)
const listScript = redisScript(LIST_SCRIPT)
const silentScript = redisScript(SILENT_SCRIPT)
const publishScript = redisScript(PUBLISH_SCRIPT)
const reserveScript = redisScript(RESERVE_SCRIPT)
const withdrawEnvironmentScript = redisScript(WITHDRAW_ENV_SCRIPT)

const ReportDoc = Schema.Struct({
  id: Schema.String,
  publicUrl: Schema.String,
  draining: Schema.Boolean,
  liveCalls: Schema.Number,
  startedAt: Schema.String,
  idleAgents: Schema.Array(Schema.Struct({ agentId: Schema.String, environmentId: Schema.String, idle: Schema.Number }))
})
const decodeReport = Schema.decodeUnknownOption(Schema.parseJson(ReportDoc))

/**
 * The instance registry and the fleet's idle dial-in agents in Redis (docs/scaling.md). Every
 * script runs on Redis's clock (`TIME`) and touches keys of one hash tag: `{instances}` for the
 * registry, the environment's `{agentId:environmentId}` for its agents and their holds.
 */
export const makeRedisInstanceStore = Effect.gen(function* () {
  const { client, keys } = yield* RedisConnection
  const agentKeys = (agentId: string, environmentId: string) =>
    (["idle", "seen", "held"] as const).map((part) => keys.fleetAgents(agentId, environmentId, part))
  const registryKeys = [keys.instances("records"), keys.instances("seen")]

  return InstanceStore.of({
    report: (report, goneAfterMs) =>
      redisCall("reportInstance", () =>
        reportScript(client, registryKeys, [report.id, JSON.stringify(report), goneAfterMs])
      ).pipe(Effect.asVoid),
    publishIdle: (instanceId, { agentId, environmentId, sockets }) =>
      redisCall("publishIdleAgents", () =>
        publishScript(client, agentKeys(agentId, environmentId), [instanceId, ...sockets])
      ).pipe(Effect.asVoid),
    list: (goneAfterMs) =>
      redisCall("listInstances", () => listScript(client, registryKeys, [goneAfterMs])).pipe(
        Effect.flatMap((reply) => {
          if (!Array.isArray(reply)) return Effect.fail(new StoreError({ operation: "listInstances" }))
          const entries: Array<InstanceEntry> = []
          for (let i = 0; i + 2 < reply.length; i += 3) {
            const report = decodeReport(reply[i + 2])
            if (Option.isNone(report)) continue
            entries.push({ ...report.value, lastSeenAt: isoAt(Number(reply[i + 1])) })
          }
          return Effect.succeed(entries.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)))
        })
      ),
    silent: (goneAfterMs) =>
      redisCall("silentInstances", () => silentScript(client, [registryKeys[1]!], [goneAfterMs])).pipe(
        Effect.map((reply) => (Array.isArray(reply) ? reply.map(String) : []))
      ),
    reserve: (agentId, environmentId, preferred, holdMs, goneAfterMs, avoid = "") =>
      redisCall("reserveAgent", () =>
        reserveScript(client, agentKeys(agentId, environmentId), [preferred, holdMs, goneAfterMs, avoid])
      ).pipe(
        Effect.map((reply) =>
          Array.isArray(reply) && reply.length === 2
            ? Option.some({ instanceId: String(reply[0]), socketId: String(reply[1]) })
            : Option.none()
        )
      ),
    withdraw: (instanceId, environments) =>
      Effect.gen(function* () {
        for (const { agentId, environmentId } of environments) {
          const [idle, seen] = agentKeys(agentId, environmentId)
          yield* redisCall("withdrawIdleAgents", () => withdrawEnvironmentScript(client, [idle!, seen!], [instanceId]))
        }
        yield* redisCall("withdrawInstance", () =>
          client.multi().hdel(registryKeys[0]!, instanceId).zrem(registryKeys[1]!, instanceId).exec()
        )
      })
  })
})

export const RedisInstanceStoreLive = Layer.effect(InstanceStore, makeRedisInstanceStore)
