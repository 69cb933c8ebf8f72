import { Context, Effect, Layer, Option, Redacted } from "effect"
import { Redis } from "ioredis"
import { AppConfig } from "../config/AppConfig.js"
import { StoreError } from "../core/StoreError.js"
import { makeKeys, type RedisKeys } from "./keys.js"

/**
 * The shared ioredis connection, opened for the lifetime of the layer and closed on shutdown.
 * `duplicate` opens a further connection (for SUBSCRIBE, which takes a connection over) that
 * closes with the caller's scope.
 */
export interface RedisConnectionShape {
  readonly client: Redis
  readonly duplicate: Effect.Effect<Redis, never, import("effect").Scope.Scope>
  /** Every key and channel name, under this deployment's REDIS_KEY_PREFIX. */
  readonly keys: RedisKeys
}

export class RedisConnection extends Context.Tag("callgate/RedisConnection")<RedisConnection, RedisConnectionShape>() {}

const open = (url: string, name: string) =>
  Effect.acquireRelease(
    Effect.sync(
      () =>
        new Redis(url, {
          connectionName: name,
          // Fail commands quickly while Redis is away instead of queueing them for ever: callers
          // (the breaker above all) have local fallbacks and must not stall behind a dead server.
          maxRetriesPerRequest: 2,
          connectTimeout: 2000,
          enableAutoPipelining: true
        })
    ),
    (client) => Effect.promise(() => client.quit().catch(() => client.disconnect()))
  ).pipe(
    Effect.tap((client) =>
      Effect.sync(() => {
        // ioredis emits "error" for every failed reconnect; without a listener Node would crash.
        client.on("error", () => {})
      })
    )
  )

export const makeRedisConnection = (url: string, keyPrefix = "callgate:") =>
  Effect.gen(function* () {
    const client = yield* open(url, "callgate")
    const duplicate = open(url, "callgate-sub")
    return RedisConnection.of({ client, duplicate, keys: makeKeys(keyPrefix) })
  })

/** Connects to `REDIS_URL`; only built when it is set (see main.ts). */
export const RedisConnectionLive = Layer.scoped(
  RedisConnection,
  Effect.gen(function* () {
    const config = yield* AppConfig
    const url = Option.getOrThrowWith(config.redisUrl, () => new Error("REDIS_URL is not set"))
    return yield* makeRedisConnection(Redacted.value(url), config.redisKeyPrefix)
  })
)

/** Runs an ioredis call as an Effect, mapping rejections to a StoreError that carries no data. */
export const redisCall = <A>(operation: string, run: () => Promise<A>) =>
  Effect.tryPromise({ try: run, catch: (cause) => new StoreError({ operation, cause }) })
