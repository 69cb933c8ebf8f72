import { createRequire } from "node:module"
import { Effect, Layer } from "effect"
import { Redis } from "ioredis"
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest"
import { BreakerStore } from "../../src/breaker/BreakerStore.js"
import { keys } from "../../src/store/keys.js"
import { RedisBreakerStoreLive } from "../../src/store/RedisBreakerStore.js"
import { makeRedisConnection, RedisConnection } from "../../src/store/RedisConnection.js"
import { uniqueId } from "../support/testApp.js"

/** Redis Cluster's key-to-slot function (CRC16 of the hash tag, mod 16384), as ioredis computes it. */
const clusterSlot: (key: string) => number = createRequire(import.meta.url)("cluster-key-slot")

/** A database of the test Redis that no other test uses, so MONITOR can tell this test's commands apart. */
const DB = 11
const urlOfDb = (url: string, db: number) => {
  const parsed = new URL(url)
  parsed.pathname = `/${db}`
  return parsed.toString()
}

interface Seen {
  readonly args: ReadonlyArray<string>
  readonly source: string
}

describe("Redis Cluster slots", () => {
  it("uses Redis's slot function (CRC16-XMODEM of the hash tag, mod 16384)", () => {
    expect(clusterSlot("123456789")).toBe(0x31c3 % 16384)
    expect(clusterSlot("{user1000}.following")).toBe(clusterSlot("user1000"))
  })

  describe("every key the breaker store touches for an environment, as Redis saw it (MONITOR)", () => {
    const url = urlOfDb(inject("redisUrl"), DB)
    let monitor: Redis
    let plain: Redis
    const seen: Array<Seen> = []

    beforeAll(async () => {
      plain = new Redis(url)
      monitor = await new Redis(url).monitor()
      monitor.on("monitor", (_time: string, args: Array<string>, source: string, database: string) => {
        if (Number(database) === DB) seen.push({ args, source })
      })
    })
    afterAll(async () => {
      monitor.disconnect()
      await plain.quit()
    })

    /** The keys of one command as Redis itself reads its arguments (COMMAND GETKEYS); none for key-less commands. */
    const keysOf = async (args: ReadonlyArray<string>): Promise<Array<string>> => {
      try {
        return (await plain.call("COMMAND", "GETKEYS", ...args)) as Array<string>
      } catch {
        return []
      }
    }

    it("are all in the slot of the environment's record, in every command and every script's own calls", async () => {
      const agentId = uniqueId("agent")
      const environmentId = uniqueId("env")
      const store = Layer.build(RedisBreakerStoreLive.pipe(Layer.provide(Layer.scoped(RedisConnection, makeRedisConnection(url)))))
      const start = seen.length
      await Effect.runPromise(
        Effect.scoped(
          Effect.gen(function* () {
            const context = yield* store
            const breaker = yield* Effect.provide(BreakerStore, context)
            yield* breaker.recordOccurrence(agentId, environmentId, "s1", 300)
            yield* breaker.recordOccurrence(agentId, environmentId, "s2", 300)
            yield* breaker.count(agentId, environmentId, 300)
            yield* breaker.publishTrip({ agentId, environmentId, sessionId: "s2", count: 2, threshold: 2, origin: "clusterSlot.test" })
            yield* breaker.state(agentId, environmentId, 300)
            yield* breaker.clear(agentId, environmentId)
          })
        )
      )
      // MONITOR streams commands in the order Redis ran them: once a later command shows, every
      // command of the store (and every call its scripts made) has been seen.
      const sentinel = uniqueId("sentinel")
      await plain.echo(sentinel)
      await until(() => seen.some((s) => s.args[0]?.toLowerCase() === "echo" && s.args[1] === sentinel))
      const commands = seen.slice(start).filter((s) => !(s.args[0]?.toLowerCase() === "echo" && s.args[1] === sentinel))

      const touched = await Promise.all(commands.map(async (command) => ({ command, keys: await keysOf(command.args) })))
      const allKeys = new Set(touched.flatMap((t) => t.keys))
      // The capture is real: the scripts' own calls are there, and so are both keys of the environment's breaker state.
      expect(commands.some((c) => c.source === "lua")).toBe(true)
      expect(allKeys).toContain(keys.breakerOccurrences(agentId, environmentId))
      expect(allKeys).toContain(keys.breakerLastTrip(agentId, environmentId))
      const slot = clusterSlot(keys.environment(agentId, environmentId))
      for (const { command, keys: commandKeys } of touched) {
        for (const key of commandKeys) expect(clusterSlot(key), `${key} in ${command.args.slice(0, 2).join(" ")}`).toBe(slot)
      }
    })
  })
})

const until = async (check: () => boolean, timeoutMs = 30_000) => {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out waiting for MONITOR")
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}
