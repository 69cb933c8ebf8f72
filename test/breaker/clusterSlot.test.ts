import { createRequire } from "node:module"
import { connect, type Socket } from "node:net"
import { Effect, Layer } from "effect"
import { Redis } from "ioredis"
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest"
import { BreakerStore } from "../../src/breaker/BreakerStore.js"
import { keys } from "../../src/redis/keys.js"
import { RedisBreakerStoreLive } from "../../src/redis/RedisBreakerStore.js"
import { makeRedisConnection, RedisConnection } from "../../src/redis/RedisConnection.js"
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
    let monitor: Socket | undefined
    let plain: Redis
    const seen: Array<Seen> = []

    beforeAll(async () => {
      plain = new Redis(url)
      monitor = await startMonitor(url, (database, source, args) => {
        if (database === DB) seen.push({ args, source })
      })
    })
    afterAll(async () => {
      monitor?.destroy()
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

/**
 * MONITOR on a connection of its own, read line by line. Not ioredis's monitor mode: it switches
 * to reading MONITOR lines only once the `+OK` has been handled a tick later, and a line that
 * arrives in the same read as the `+OK` (any client's command on the shared test server) fails
 * the connection with "Command queue state error".
 */
const startMonitor = (url: string, onCommand: (database: number, source: string, args: Array<string>) => void) =>
  new Promise<Socket>((resolve, reject) => {
    const { hostname, port } = new URL(url)
    const socket = connect(Number(port || 6379), hostname)
    let buffered = ""
    let started = false
    socket.setEncoding("latin1")
    socket.once("error", reject)
    socket.on("connect", () => socket.write("MONITOR\r\n"))
    socket.on("data", (chunk: string) => {
      buffered += chunk
      for (let end = buffered.indexOf("\r\n"); end >= 0; end = buffered.indexOf("\r\n")) {
        const line = buffered.slice(0, end)
        buffered = buffered.slice(end + 2)
        if (!started) {
          if (line !== "+OK") return reject(new Error(`MONITOR answered ${line}`))
          started = true
          resolve(socket)
          continue
        }
        // +<time> [<db> <client address or lua>] "arg" "arg" ...
        const match = /^\+[0-9.]+ \[(\d+) ([^\]]+)\] (.*)$/.exec(line)
        if (match !== null) onCommand(Number(match[1]), match[2]!, monitorArgs(match[3]!))
      }
    })
  })

/** The quoted arguments of a MONITOR line, unescaped as Redis escaped them (sdscatrepr). */
const monitorArgs = (text: string): Array<string> => {
  const args: Array<string> = []
  let at = 0
  while (at < text.length) {
    if (text[at] !== '"') {
      at++
      continue
    }
    let arg = ""
    at++
    while (at < text.length && text[at] !== '"') {
      if (text[at] === "\\") {
        const next = text[at + 1]!
        if (next === "x") {
          arg += String.fromCharCode(parseInt(text.slice(at + 2, at + 4), 16))
          at += 4
          continue
        }
        arg += ({ n: "\n", r: "\r", t: "\t", a: "\x07", b: "\b" } as Record<string, string>)[next] ?? next
        at += 2
        continue
      }
      arg += text[at]
      at++
    }
    args.push(arg)
    at++
  }
  return args
}
