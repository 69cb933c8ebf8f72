import { Duration, Effect, Either, Layer, Option, Schema } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { RedisConnection, redisCall } from "./RedisConnection.js"
import { compareAndSet } from "./RedisCompareAndSet.js"
import { redisScript } from "./RedisScript.js"
import type { Checkpoint } from "../kernel/CallLegs.js"
import { StoreError } from "../kernel/StoreError.js"
import { Session } from "../sessions/SessionSchema.js"
import { type SessionCursor, SessionStore } from "../sessions/SessionStore.js"

/** Index entries read per round trip while listing, and the most read for one page. */
const SCAN_BATCH = 100
const SCAN_LIMIT = 2000

const decodeDoc = Schema.decodeUnknown(Schema.parseJson(Session))

/**
 * The agent's latest checkpoint is the field `checkpoint` of the session's record hash: in its slot,
 * outside the compare-and-set of `v`/`doc` (a checkpoint never conflicts with a turn or an ending),
 * and gone with the record at the retention. Saved before the record is written, it creates the
 * hash with the checkpoint alone (the record reads as absent) and gives it the retention.
 */
const saveCheckpointScript = redisScript(`
redis.call('HSET', KEYS[1], 'checkpoint', ARGV[1])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
`)

/**
 * Each session is a hash {v: version, doc: JSON} that expires after the retention; the agent's
 * sessions are indexed in two sorted sets scored by createdAt (all sessions, and per environment).
 * All of one agent's session keys carry the hash tag {agentId}: a MULTI writes record and indexes
 * together. Updates go through compare-and-set (RedisCompareAndSet), so a turn appended while
 * the session ends is never lost. The hash's other fields (the rescue claim, the checkpoint) ride along.
 */
export const makeRedisSessionStore = (retention: Duration.Duration) =>
  Effect.gen(function* () {
    const { client, keys, replicated } = yield* RedisConnection
    const retentionMs = Duration.toMillis(retention)
    const clock = yield* Effect.clock

    const read = (operation: string, agentId: string, sessionId: string) =>
      redisCall(operation, () => client.hmget(keys.session(agentId, sessionId), "v", "doc")).pipe(
        Effect.flatMap(([version, doc]) =>
          version === null || doc === null || version === undefined || doc === undefined
            ? Effect.succeed(Option.none<{ version: string; session: Session }>())
            : decodeDoc(doc).pipe(
                Effect.map((session) => Option.some({ version, session })),
                Effect.mapError((cause) => new StoreError({ operation, cause }))
              )
        )
      )

    const update = (agentId: string, sessionId: string, change: (current: Session) => Session) =>
      compareAndSet({
        client,
        key: keys.session(agentId, sessionId),
        operation: "session.update",
        read: read("session.update", agentId, sessionId).pipe(
          Effect.map(Option.map((current) => ({ version: Number(current.version), value: current.session })))
        ),
        change: (current: Session) => Either.right(change(current))
      }).pipe(
        // A session's end must survive a failover: it waits for the replicas (RedisConnection.replicated).
        Effect.tap((written) =>
          Option.isSome(written) && written.value.endedAt !== null ? replicated(keys.session(agentId, sessionId), "session.update") : Effect.void
        )
      )

    /** Reads index entries newest first from `after` (exclusive), skipping the ties already seen. */
    const scan = (index: string, after: SessionCursor | undefined, offset: number) =>
      redisCall("session.list", () =>
        client.zrevrangebyscore(index, after === undefined ? "+inf" : String(after.createdAtMs), "-inf", "WITHSCORES", "LIMIT", offset, SCAN_BATCH)
      ).pipe(
        Effect.map((flat) => {
          const entries: Array<SessionCursor> = []
          for (let i = 0; i + 1 < flat.length; i += 2) entries.push({ id: flat[i]!, createdAtMs: Number(flat[i + 1]) })
          return entries
        })
      )

    return SessionStore.of({
      insert: (session) => {
        const score = Date.parse(session.createdAt)
        const oldest = String(clock.unsafeCurrentTimeMillis() - retentionMs)
        const agentIndex = keys.agentSessions(session.agentId)
        const envIndex = keys.environmentSessions(session.agentId, session.environmentId)
        // Owned first (another slot, so not in the MULTI): an owned session without a record is
        // only let go of by the reconciliation, a record without its owner would never be found.
        const owner = session.instanceId
        const own: Effect.Effect<void, StoreError> =
          owner === undefined
            ? Effect.void
            : Effect.asVoid(redisCall("session.insert", () => client.sadd(keys.instanceSessions(owner), `${session.agentId} ${session.id}`)))
        return Effect.zipRight(own, redisCall("session.insert", () =>
          client
            .multi()
            .hset(keys.session(session.agentId, session.id), "v", "1", "doc", JSON.stringify(session))
            .pexpire(keys.session(session.agentId, session.id), retentionMs)
            .zadd(agentIndex, score, session.id)
            .zadd(envIndex, score, session.id)
            .zremrangebyscore(agentIndex, "-inf", `(${oldest}`)
            .zremrangebyscore(envIndex, "-inf", `(${oldest}`)
            .pexpire(agentIndex, retentionMs)
            .pexpire(envIndex, retentionMs)
            .exec()
        ).pipe(
          Effect.flatMap((results) =>
            results === null || results.some(([error]) => error !== null)
              ? Effect.fail(new StoreError({ operation: "session.insert", cause: results?.find(([error]) => error !== null)?.[0] }))
              : session.endedAt !== null
                ? replicated(keys.session(session.agentId, session.id), "session.insert")
                : Effect.void
          )
        ))
      },
      ownedBy: (instanceId) =>
        redisCall("session.owned", () => client.smembers(keys.instanceSessions(instanceId))).pipe(
          Effect.map((members) =>
            members.flatMap((member) => {
              const [agentId, sessionId] = member.split(" ")
              return agentId && sessionId ? [{ agentId, sessionId }] : []
            })
          )
        ),
      disown: (instanceId, ref) =>
        redisCall("session.disown", () => client.srem(keys.instanceSessions(instanceId), `${ref.agentId} ${ref.sessionId}`)).pipe(Effect.asVoid),
      saveCheckpoint: (agentId, sessionId, checkpoint) =>
        redisCall("session.saveCheckpoint", () =>
          saveCheckpointScript(client, [keys.session(agentId, sessionId)], [JSON.stringify(checkpoint), retentionMs])
        ).pipe(Effect.asVoid),
      checkpointOf: (agentId, sessionId) =>
        redisCall("session.checkpointOf", () => client.hget(keys.session(agentId, sessionId), "checkpoint")).pipe(
          Effect.flatMap((json) =>
            json === null
              ? Effect.succeed(Option.none<Checkpoint>())
              : Effect.try({
                  try: () => Option.some(JSON.parse(json) as Checkpoint),
                  catch: (cause) => new StoreError({ operation: "session.checkpointOf", cause })
                })
          )
        ),
      get: (agentId, sessionId) => Effect.map(read("session.get", agentId, sessionId), Option.map((found) => found.session)),
      update,
      list: (agentId, options) =>
        Effect.gen(function* () {
          const index =
            options.environmentId !== undefined ? keys.environmentSessions(agentId, options.environmentId) : keys.agentSessions(agentId)
          const items: Array<Session> = []
          const after = options.after
          let offset = 0
          let scanned = 0
          let position: SessionCursor | undefined
          for (;;) {
            const entries = yield* scan(index, after, offset)
            offset += entries.length
            const fresh = entries.filter(
              (entry) => after === undefined || entry.createdAtMs < after.createdAtMs || entry.id < after.id
            )
            const docs = yield* redisCall("session.list", () => {
              const pipeline = client.pipeline()
              for (const entry of fresh) pipeline.hget(keys.session(agentId, entry.id), "doc")
              return pipeline.exec()
            })
            for (let i = 0; i < fresh.length; i++) {
              const entry = fresh[i]!
              scanned++
              const doc = docs?.[i]?.[1]
              if (typeof doc !== "string") {
                // The record expired before its index entry was pruned.
                yield* redisCall("session.list", () => client.zrem(index, entry.id)).pipe(Effect.ignore)
                continue
              }
              const session = yield* decodeDoc(doc).pipe(Effect.mapError((cause) => new StoreError({ operation: "session.list", cause })))
              if (options.status !== undefined && session.status !== options.status) {
                position = entry
                continue
              }
              if (items.length === options.limit) return { items, next: Option.some(position ?? entry) }
              items.push(session)
              position = entry
            }
            if (entries.length < SCAN_BATCH) return { items, next: Option.none() }
            // A page of a rare status in a long history: stop reading, hand back where to go on.
            if (scanned >= SCAN_LIMIT && position !== undefined) return { items, next: Option.some(position) }
          }
        })
    })
  })

export const RedisSessionStoreLive = Layer.effect(
  SessionStore,
  Effect.flatMap(AppConfig, (config) => makeRedisSessionStore(config.sessionRetention))
)
