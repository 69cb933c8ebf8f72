import type { TestProject } from "vitest/node"
import { type RedisCluster, startRedisCluster } from "./redisCluster.js"
import { type RedisServer, startRedisServer } from "./redisServer.js"

declare module "vitest" {
  export interface ProvidedContext {
    redisUrl: string
    /** A Redis Cluster of three primaries with a replica each (`redis-cluster://...`): REDIS_CLUSTER_URL when given, else started here. */
    redisClusterUrl: string
  }
}

let server: RedisServer | undefined
let cluster: RedisCluster | undefined

/** One Redis for the run: REDIS_URL when given, else a private redis-server on a free port. */
export async function setup(project: TestProject) {
  const givenCluster = process.env.REDIS_CLUSTER_URL
  if (givenCluster) project.provide("redisClusterUrl", givenCluster)
  else {
    cluster = await startRedisCluster(3, 1)
    project.provide("redisClusterUrl", cluster.url)
  }
  const given = process.env.REDIS_URL
  if (given) {
    project.provide("redisUrl", given)
    return
  }
  server = await startRedisServer()
  project.provide("redisUrl", server.url)
}

export async function teardown() {
  await cluster?.stop()
  await server?.stop()
}
