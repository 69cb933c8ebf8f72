import { Layer } from "effect"
import { inject } from "vitest"
import { CallLeaseStore } from "../../src/sessions/CallLeaseStore.js"
import { makeMemoryCallLeaseStore } from "../../src/sessions/MemoryCallLeaseStore.js"
import { makeRedisCallLeaseStore } from "../../src/redis/RedisCallLeaseStore.js"
import { makeRedisConnection, RedisConnection } from "../../src/redis/RedisConnection.js"
import { uniqueId } from "../support/testApp.js"
import { callLeaseStoreContract } from "./CallLeaseStore.contract.js"

callLeaseStoreContract("memory", Layer.effect(CallLeaseStore, makeMemoryCallLeaseStore))
callLeaseStoreContract(
  "redis",
  Layer.effect(CallLeaseStore, makeRedisCallLeaseStore).pipe(Layer.provide(Layer.scoped(RedisConnection, makeRedisConnection(inject("redisUrl"), `${uniqueId("t")}:`))))
)
callLeaseStoreContract(
  "redis cluster",
  Layer.effect(CallLeaseStore, makeRedisCallLeaseStore).pipe(
    Layer.provide(Layer.scoped(RedisConnection, makeRedisConnection(inject("redisClusterUrl"), `${uniqueId("t")}:`)))
  )
)
