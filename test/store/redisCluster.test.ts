import { Duration, Effect, Layer } from "effect"
import { inject } from "vitest"
import { InstanceStore } from "../../src/fleet/InstanceStore.js"
import { SessionStore } from "../../src/sessions/SessionStore.js"
import { RedisApiKeyStoreLive } from "../../src/redis/RedisApiKeyStore.js"
import { RedisBreakerStoreLive } from "../../src/redis/RedisBreakerStore.js"
import { makeRedisConnection, RedisConnection } from "../../src/redis/RedisConnection.js"
import { RedisEnvironmentStoreLive } from "../../src/redis/RedisEnvironmentStore.js"
import { makeRedisInstanceStore } from "../../src/redis/RedisInstanceStore.js"
import { makeRedisOutboxStore } from "../../src/redis/RedisOutboxStore.js"
import { makeRedisSessionStore } from "../../src/redis/RedisSessionStore.js"
import { makeRedisSpentTokenStore } from "../../src/redis/RedisSpentTokenStore.js"
import { SpentTokenStore } from "../../src/telephony/SpentTokenStore.js"
import { breakerStoreContract } from "../breaker/BreakerStore.contract.js"
import { instanceStoreContract } from "../fleet/InstanceStore.contract.js"
import { sessionStoreContract } from "../sessions/SessionStore.contract.js"
import { uniqueId } from "../support/testApp.js"
import { spentTokenStoreContract } from "../telephony/SpentTokenStore.contract.js"
import { outboxStoreContract } from "../webhooks/OutboxStore.contract.js"
import { apiKeyStoreContract } from "./ApiKeyStore.contract.js"
import { environmentStoreContract } from "./EnvironmentStore.contract.js"

/**
 * Every store adapter's contract suite against a real three-master Redis Cluster (the test setup
 * creates it with redis-server --cluster-enabled yes and redis-cli --cluster create), through the
 * ioredis Cluster client a `redis-cluster://` REDIS_URL opens: each multi-key script and
 * transaction must touch one hash slot, or the cluster refuses it (CROSSSLOT).
 */
const connection = () => Layer.scoped(RedisConnection, makeRedisConnection(inject("redisClusterUrl"), `${uniqueId("c")}:`))

environmentStoreContract("redis cluster", RedisEnvironmentStoreLive.pipe(Layer.provide(connection())))
apiKeyStoreContract("redis cluster", RedisApiKeyStoreLive.pipe(Layer.provide(connection())))
sessionStoreContract("redis cluster", Layer.effect(SessionStore, makeRedisSessionStore(Duration.days(30))).pipe(Layer.provide(connection())))
outboxStoreContract("redis cluster", connection(), Effect.suspend(() => makeRedisOutboxStore(uniqueId("outbox"))))
breakerStoreContract("redis cluster", () => RedisBreakerStoreLive.pipe(Layer.provide(connection())))
spentTokenStoreContract("redis cluster", Layer.effect(SpentTokenStore, makeRedisSpentTokenStore).pipe(Layer.provide(connection())))
instanceStoreContract("redis cluster", Layer.effect(InstanceStore, makeRedisInstanceStore).pipe(Layer.provide(connection())))
