import { Effect, Either, Layer, Option, Schema } from "effect"
import { StoredEnvironment } from "../environments/EnvironmentSchema.js"
import { EnvironmentStore } from "../environments/EnvironmentStore.js"
import { RedisConnection, redisCall, redisHealth } from "./RedisConnection.js"
import { compareAndSet } from "./RedisCompareAndSet.js"
import { StoreError } from "../kernel/StoreError.js"

/**
 * Each environment is a hash {v: version, doc: JSON}, changed through compare-and-set
 * (RedisCompareAndSet), so concurrent PATCHes of one environment re-read and re-apply instead of
 * overwriting each other.
 */
const decodeDoc = Schema.decodeUnknown(Schema.parseJson(StoredEnvironment))
const encodeDoc = (env: StoredEnvironment) => JSON.stringify(env)

export const makeRedisEnvironmentStore = Effect.gen(function* () {
  const { client, keys, replicated } = yield* RedisConnection

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
  ): Effect.Effect<Option.Option<StoredEnvironment>, StoreError | E> =>
    compareAndSet({
      client,
      key: keys.environment(agentId, environmentId),
      operation: "environment.update",
      read: get(agentId, environmentId).pipe(Effect.map(Option.map((value) => ({ version: value.version, value })))),
      change,
      stamp: (next, version) => ({ ...next, version })
    }).pipe(Effect.tap((written) => (Option.isSome(written) ? replicated(keys.environment(agentId, environmentId), "environment.update") : Effect.void)))

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
        Effect.zipRight(redisCall("environment.insert", () => client.sadd(keys.agents, env.agentId))),
        Effect.zipRight(replicated(keys.environment(env.agentId, env.id), "environment.insert"))
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
        Effect.tap(() => replicated(keys.environment(agentId, environmentId), "environment.remove")),
        Effect.map((deleted) => deleted > 0)
      ),
    // The index keeps every agent that ever had an environment (removing one from it could race an
    // insert in another hash slot); agents whose environments are all gone are skipped here.
    listAgents: Effect.gen(function* () {
      const agentIds = (yield* redisCall("environment.listAgents", () => client.smembers(keys.agents))).sort()
      const counts = yield* redisCall("environment.listAgents", () =>
        Promise.all(agentIds.map((agentId) => client.zcard(keys.agentEnvironments(agentId))))
      )
      return agentIds.flatMap((agentId, i) => (counts[i]! > 0 ? [{ agentId, environments: counts[i]! }] : []))
    }),
    ping: redisHealth(client)
  })
})

export const RedisEnvironmentStoreLive = Layer.effect(EnvironmentStore, makeRedisEnvironmentStore)
