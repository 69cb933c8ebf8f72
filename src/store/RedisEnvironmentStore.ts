import { Effect, Either, Layer, Option, Schema } from "effect"
import { StoredEnvironment } from "../environments/EnvironmentSchema.js"
import { EnvironmentStore } from "./EnvironmentStore.js"
import { keys } from "./keys.js"
import { RedisConnection, redisCall } from "./RedisConnection.js"
import { MAX_CAS_ATTEMPTS, StoreError } from "./StoreError.js"

/**
 * Each environment is a hash {v: version, doc: JSON}. Writes go through a compare-and-set script
 * that only writes when `v` is still the version the writer read, so concurrent PATCHes of one
 * environment re-read and re-apply instead of overwriting each other.
 */
const CAS_SCRIPT = `
local current = redis.call('HGET', KEYS[1], 'v')
if current == false then return -1 end
if current ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'doc', ARGV[3])
return 1
`

const decodeDoc = Schema.decodeUnknown(Schema.parseJson(StoredEnvironment))
const encodeDoc = (env: StoredEnvironment) => JSON.stringify(env)

class CasConflict {
  readonly _tag = "CasConflict"
}

export const makeRedisEnvironmentStore = Effect.gen(function* () {
  const { client } = yield* RedisConnection

  const decode = (operation: string, doc: string | null) =>
    doc === null
      ? Effect.succeed(Option.none<StoredEnvironment>())
      : decodeDoc(doc).pipe(
          Effect.map(Option.some),
          Effect.mapError((cause) => new StoreError({ operation, cause }))
        )

  const get = (agentId: string, environmentId: string) =>
    redisCall("environment.get", () => client.hget(keys.environment(agentId, environmentId), "doc")).pipe(
      Effect.flatMap((doc) => decode("environment.get", doc))
    )

  const update = <E>(
    agentId: string,
    environmentId: string,
    change: (current: StoredEnvironment) => Either.Either<StoredEnvironment, E>
  ): Effect.Effect<Option.Option<StoredEnvironment>, StoreError | E> => {
    const key = keys.environment(agentId, environmentId)
    const attempt: Effect.Effect<Option.Option<StoredEnvironment>, StoreError | E | CasConflict> = Effect.gen(function* () {
      const current = yield* get(agentId, environmentId)
      if (Option.isNone(current)) return Option.none()
      const next = yield* Either.match(change(current.value), { onLeft: Effect.fail, onRight: Effect.succeed })
      const stored = { ...next, version: current.value.version + 1 }
      const written = yield* redisCall("environment.update", () =>
        client.eval(CAS_SCRIPT, 1, key, String(current.value.version), String(stored.version), encodeDoc(stored))
      )
      if (written === -1) return Option.none()
      if (written !== 1) return yield* Effect.fail(new CasConflict())
      return Option.some(stored)
    })
    return attempt.pipe(
      Effect.retry({ while: (error) => error instanceof CasConflict, times: MAX_CAS_ATTEMPTS }),
      Effect.catchIf(
        (error): error is CasConflict => error instanceof CasConflict,
        () => Effect.fail(new StoreError({ operation: "environment.update (too many concurrent writers)" }))
      )
    )
  }

  return EnvironmentStore.of({
    insert: (env) =>
      redisCall("environment.insert", () =>
        client
          .multi()
          .hset(keys.environment(env.agentId, env.id), "v", String(env.version), "doc", encodeDoc(env))
          .exec()
      ).pipe(
        // The index lives in another hash slot, so it is written after the record, not in its transaction.
        Effect.zipRight(
          redisCall("environment.insert", () => client.zadd(keys.agentEnvironments(env.agentId), Date.parse(env.createdAt), env.id))
        ),
        Effect.asVoid
      ),
    get,
    list: (agentId) =>
      Effect.gen(function* () {
        const ids = yield* redisCall("environment.list", () => client.zrange(keys.agentEnvironments(agentId), 0, -1))
        const docs = yield* redisCall("environment.list", () =>
          Promise.all(ids.map((id) => client.hget(keys.environment(agentId, id), "doc")))
        )
        const found = yield* Effect.forEach(docs, (doc) => decode("environment.list", doc))
        return found.flatMap((env) => (Option.isSome(env) ? [env.value] : []))
      }),
    update,
    remove: (agentId, environmentId) =>
      redisCall("environment.remove", () => client.del(keys.environment(agentId, environmentId))).pipe(
        Effect.tap(() => redisCall("environment.remove", () => client.zrem(keys.agentEnvironments(agentId), environmentId))),
        Effect.map((deleted) => deleted > 0)
      ),
    ping: redisCall("ping", () => client.ping()).pipe(Effect.asVoid)
  })
})

export const RedisEnvironmentStoreLive = Layer.effect(EnvironmentStore, makeRedisEnvironmentStore)
