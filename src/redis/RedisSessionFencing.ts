import { Duration, Effect, Layer } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { SessionFencing } from "../kernel/SessionFencing.js"
import { RedisConnection, redisCall } from "./RedisConnection.js"
import { redisScript } from "./RedisScript.js"

/**
 * The rescue claim is a field of the session's record hash (`rescuedBy`), set with HSETNX: atomic
 * with the record, in its slot, and gone with it at the retention. A claim on a session whose
 * record was never written creates the hash with the claim alone (the record reads as absent)
 * and gives it the retention too. 1: claimed now; 2: already claimed by the same instance; 0: by another.
 */
const claimScript = redisScript(`
local won = redis.call('HSETNX', KEYS[1], 'rescuedBy', ARGV[1])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if won == 1 then return 1 end
if redis.call('HGET', KEYS[1], 'rescuedBy') == ARGV[1] then return 2 end
return 0
`)

/** Reads and clears an instance's notes in one step (a set in the instance's slot). */
const takeScript = redisScript(`
local members = redis.call('SMEMBERS', KEYS[1])
if #members > 0 then redis.call('DEL', KEYS[1]) end
return members
`)

export const makeRedisSessionFencing = (retention: Duration.Duration) =>
  Effect.gen(function* () {
    const { client, keys } = yield* RedisConnection
    const retentionMs = Duration.toMillis(retention)
    return SessionFencing.of({
      claimRescue: (session, by) =>
        redisCall("session.claimRescue", () => claimScript(client, [keys.session(session.agentId, session.sessionId)], [by, retentionMs])).pipe(
          Effect.map((result) => Number(result) !== 0)
        ),
      noteTaken: (owner, session) =>
        redisCall("session.noteTaken", () =>
          client.multi().sadd(keys.instanceTaken(owner), `${session.agentId} ${session.sessionId}`).pexpire(keys.instanceTaken(owner), retentionMs).exec()
        ).pipe(Effect.asVoid),
      takenFrom: (owner) =>
        redisCall("session.takenFrom", () => takeScript(client, [keys.instanceTaken(owner)], [])).pipe(
          Effect.map((members) =>
            (members as Array<string>).flatMap((member) => {
              const [agentId, sessionId] = member.split(" ")
              return agentId && sessionId ? [{ agentId, sessionId }] : []
            })
          )
        )
    })
  })

export const RedisSessionFencingLive = Layer.effect(
  SessionFencing,
  Effect.flatMap(AppConfig, (config) => makeRedisSessionFencing(config.sessionRetention))
)
