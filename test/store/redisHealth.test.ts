import { spawnSync } from "node:child_process"
import { Effect, Exit, Scope } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import { makeRedisConnection, redisHealth } from "../../src/redis/RedisConnection.js"
import { type RedisCluster, startRedisCluster } from "../support/redisCluster.js"
import { uniqueId } from "../support/testApp.js"

const clusterState = (port: number) =>
  /cluster_state:(\w+)/.exec(spawnSync("redis-cli", ["-p", String(port), "cluster", "info"], { encoding: "utf8" }).stdout ?? "")?.[1]

/**
 * /readyz asks the store whether it can serve (Environments.ping -> redisHealth): a Redis Cluster
 * that lost a primary with no replica to promote still answers PING on its other nodes, but reports
 * cluster_state:fail and refuses that primary's slots, so it is not ready.
 */
describe("redisHealth on a Redis Cluster", () => {
  let cluster: RedisCluster | undefined
  afterEach(async () => {
    await cluster?.stop()
    cluster = undefined
  })

  it("ready while cluster_state:ok; not ready once a primary is gone and the cluster reports cluster_state:fail", async () => {
    cluster = await startRedisCluster()
    const live = cluster
    const scope = Effect.runSync(Scope.make())
    try {
      const connection = await Effect.runPromise(Scope.extend(makeRedisConnection(live.url, `${uniqueId("h")}:`), scope))
      expect(Exit.isSuccess(await Effect.runPromiseExit(redisHealth(connection.client)))).toBe(true)
      spawnSync("redis-cli", ["-p", String(live.ports[0]), "shutdown", "nosave"])
      // The others mark it failed after cluster-node-timeout (2 s).
      for (let n = 0; n < 300 && clusterState(live.ports[1]!) !== "fail"; n++) await new Promise((resolve) => setTimeout(resolve, 100))
      expect(clusterState(live.ports[1]!)).toBe("fail")
      let exit = await Effect.runPromiseExit(redisHealth(connection.client))
      for (let n = 0; n < 100 && Exit.isSuccess(exit); n++) {
        await new Promise((resolve) => setTimeout(resolve, 100))
        exit = await Effect.runPromiseExit(redisHealth(connection.client))
      }
      expect(Exit.isFailure(exit)).toBe(true)
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
    }
  })
})
