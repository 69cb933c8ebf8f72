import type { TestProject } from "vitest/node"
import { type RedisServer, startRedisServer } from "./redisServer.js"

declare module "vitest" {
  export interface ProvidedContext {
    redisUrl: string
  }
}

let server: RedisServer | undefined

/** One Redis for the run: REDIS_URL when given, else a private redis-server on a free port. */
export async function setup(project: TestProject) {
  const given = process.env.REDIS_URL
  if (given) {
    project.provide("redisUrl", given)
    return
  }
  server = await startRedisServer()
  project.provide("redisUrl", server.url)
}

export async function teardown() {
  await server?.stop()
}
