import { Duration, Layer } from "effect"
import { inject } from "vitest"
import { MemorySessionFencingLive } from "../../src/kernel/MemorySessionFencing.js"
import { makeRedisConnection, RedisConnection } from "../../src/redis/RedisConnection.js"
import { makeRedisSessionFencing } from "../../src/redis/RedisSessionFencing.js"
import { makeRedisSessionStore } from "../../src/redis/RedisSessionStore.js"
import { SessionFencing } from "../../src/kernel/SessionFencing.js"
import { makeMemorySessionStore } from "../../src/sessions/MemorySessionStore.js"
import { SessionStore } from "../../src/sessions/SessionStore.js"
import { uniqueId } from "../support/testApp.js"
import { sessionFencingContract } from "./SessionFencing.contract.js"

sessionFencingContract(
  "memory",
  Layer.mergeAll(MemorySessionFencingLive, Layer.effect(SessionStore, makeMemorySessionStore(Duration.days(30))))
)

const redis = (url: string) =>
  Layer.mergeAll(
    Layer.effect(SessionFencing, makeRedisSessionFencing(Duration.days(30))),
    Layer.effect(SessionStore, makeRedisSessionStore(Duration.days(30)))
  ).pipe(Layer.provide(Layer.scoped(RedisConnection, makeRedisConnection(url, `${uniqueId("fence")}:`))))

sessionFencingContract("redis", redis(inject("redisUrl")))
sessionFencingContract("redis cluster", redis(inject("redisClusterUrl")))
