import { createHash } from "node:crypto"
import type { RedisClient as Redis } from "./RedisConnection.js"

/** Runs a Lua script on a client: `keys` then `args`, as EVAL takes them. */
export type RedisScript = (client: Redis, keys: ReadonlyArray<string>, args: ReadonlyArray<string | number>) => Promise<unknown>

/**
 * The one way callgate runs Lua on Redis: EVALSHA by the script's SHA-1, and EVAL (which caches the
 * script on the server) the first time a server does not have it, e.g. after a restart or a
 * failover. Works on any connection, including ones without an offline queue, and in a Redis
 * Cluster as long as every key of one call hashes to one slot (see keys.ts).
 */
export const redisScript = (lua: string): RedisScript => {
  const sha = createHash("sha1").update(lua).digest("hex")
  return async (client, keys, args) => {
    try {
      return await client.evalsha(sha, keys.length, ...keys, ...args)
    } catch (error) {
      if (error instanceof Error && error.message.startsWith("NOSCRIPT")) return await client.eval(lua, keys.length, ...keys, ...args)
      throw error
    }
  }
}
