import { Layer } from "effect"
import { inject } from "vitest"
import { InstanceStore } from "../../src/fleet/InstanceStore.js"
import { makeRedisConnection, RedisConnection } from "../../src/redis/RedisConnection.js"
import { makeRedisInstanceStore } from "../../src/redis/RedisInstanceStore.js"
import { uniqueId } from "../support/testApp.js"
import { instanceStoreContract } from "./InstanceStore.contract.js"

const connection = Layer.scoped(RedisConnection, makeRedisConnection(inject("redisUrl"), `${uniqueId("t")}:`))

instanceStoreContract("redis", Layer.effect(InstanceStore, makeRedisInstanceStore).pipe(Layer.provide(connection)))
