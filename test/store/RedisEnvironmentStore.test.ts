import { expect, layer } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import type { RedisClient as Redis } from "../../src/redis/RedisConnection.js"
import { inject } from "vitest"
import { Environments } from "../../src/environments/Environments.js"
import { RedisConnection, makeRedisConnection } from "../../src/redis/RedisConnection.js"
import { RedisEnvironmentStoreLive } from "../../src/redis/RedisEnvironmentStore.js"
import { KEY_PREFIX, envTag, keys } from "../../src/redis/keys.js"
import { domainLayer, uniqueId } from "../support/testApp.js"
import { environmentStoreContract } from "./EnvironmentStore.contract.js"

/** A connection of its own: what anyone with access to the Redis could read. */
const connection = Layer.scoped(RedisConnection, makeRedisConnection(inject("redisUrl")))

environmentStoreContract("redis", RedisEnvironmentStoreLive.pipe(Layer.provide(connection)))

/** Every key in Redis whose name mentions `text` (SCAN, so the shared test Redis is never blocked). */
const keysMentioning = (client: Redis, text: string) =>
  Effect.promise(async () => {
    const found: Array<string> = []
    let cursor = "0"
    do {
      const [next, batch] = await client.scan(cursor, "MATCH", `*${text}*`, "COUNT", 1000)
      found.push(...batch)
      cursor = next
    } while (cursor !== "0")
    return found
  })

/** A key's whole value as text, whatever its type: what anyone with access to Redis could read. */
const rawValue = (client: Redis, key: string) =>
  Effect.promise(async () => {
    const type = await client.type(key)
    switch (type) {
      case "string":
        return (await client.get(key)) ?? ""
      case "hash":
        return JSON.stringify(await client.hgetall(key))
      case "zset":
        return JSON.stringify(await client.zrange(key, 0, -1, "WITHSCORES"))
      case "set":
        return JSON.stringify(await client.smembers(key))
      case "list":
        return JSON.stringify(await client.lrange(key, 0, -1))
      case "stream":
        return JSON.stringify(await client.xrange(key, "-", "+"))
      default:
        return ""
    }
  })

/** The forms a leaked secret could take: as shown, its base64 body, that body as base64url and hex. */
const leakForms = (secret: string) => {
  const body = secret.slice("whsec_".length)
  const bytes = Buffer.from(body, "base64")
  expect(bytes.length).toBe(32)
  return [secret, body, bytes.toString("base64url"), bytes.toString("hex")]
}

layer(Layer.merge(domainLayer("redis", { REDIS_KEY_PREFIX: KEY_PREFIX }), connection), { excludeTestServices: true, timeout: "30 seconds" })("Redis environment storage", (it) => {
  it.effect("the raw Redis value of an environment holds neither of its secrets in any form", () =>
    Effect.gen(function* () {
      const envs = yield* Environments
      const { client } = yield* RedisConnection
      const agentId = uniqueId("agent")
      const created = yield* envs.create(agentId, {
        name: "secrets at rest",
        webhookUrl: "https://hooks.example.com/events",
        errorFallbackType: "webhook",
        errorFallbackValue: "https://fallback.example.com/rescue"
      })
      const secrets = [created.webhookSecret!, created.errorFallbackWebhookSecret!]
      for (const secret of secrets) expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
      // Rotated secrets must not leak either.
      secrets.push(yield* envs.regenerateWebhookSecret(agentId, created.id))
      secrets.push(yield* envs.regenerateErrorFallbackWebhookSecret(agentId, created.id))

      const environmentKeys = yield* keysMentioning(client, created.id)
      expect(environmentKeys).toContain(keys.environment(agentId, created.id))
      const stored = [
        ...(yield* Effect.forEach(environmentKeys, (key) => rawValue(client, key))),
        yield* rawValue(client, keys.agentEnvironments(agentId))
      ].join("\n")
      expect(stored).toContain("secrets at rest") // the read really returned the record
      for (const secret of secrets) {
        for (const form of leakForms(secret)) expect(stored).not.toContain(form)
      }
      // The stored record still opens to the current secrets: sealed, not dropped.
      const resolved = yield* envs.resolve(agentId, created.id)
      expect(resolved.webhookSecret).toEqual(Option.some(secrets[2]))
      expect(resolved.errorFallbackWebhookSecret).toEqual(Option.some(secrets[3]))
    }))

  it.effect("every key of one environment carries the {agentId:environmentId} hash tag, under the prefix", () =>
    Effect.gen(function* () {
      const envs = yield* Environments
      const { client } = yield* RedisConnection
      const agentId = uniqueId("agent")
      const created = yield* envs.create(agentId, { name: "tagged", webhookUrl: "https://hooks.example.com/events" })
      yield* envs.update(agentId, created.id, { errorFallbackType: "phone", errorFallbackValue: "+14155550100" })
      const cloned = yield* envs.clone(agentId, created.id)

      for (const env of [created, cloned]) {
        const environmentKeys = yield* keysMentioning(client, env.id)
        expect(environmentKeys.length).toBeGreaterThan(0)
        for (const key of environmentKeys) {
          expect(key.startsWith(KEY_PREFIX)).toBe(true)
          expect(key).toContain(envTag(agentId, env.id))
          // Redis Cluster hashes the text between the first "{" and the next "}": it must be the tag.
          expect(key.slice(key.indexOf("{"), key.indexOf("}") + 1)).toBe(`{${agentId}:${env.id}}`)
        }
      }
      expect(envTag(agentId, created.id)).toBe(`{${agentId}:${created.id}}`)
    }))
})
