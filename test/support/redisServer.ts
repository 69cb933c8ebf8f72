import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"

export const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))))
    })
  })

export interface RedisServer {
  readonly url: string
  readonly port: number
  readonly stop: () => Promise<void>
}

/**
 * Starts a private `redis-server` on a free loopback port (nothing persisted). Fails loudly when
 * redis-server is missing: Redis tests are never skipped.
 */
export const startRedisServer = async (port?: number): Promise<RedisServer> => {
  if (spawnSync("redis-server", ["--version"]).status !== 0) {
    throw new Error("redis-server is not installed: install it (apt-get install redis-server) or set REDIS_URL")
  }
  const chosen = port ?? (await freePort())
  const dir = mkdtempSync(join(tmpdir(), "callgate-redis-"))
  const child: ChildProcess = spawn(
    "redis-server",
    ["--port", String(chosen), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--protected-mode", "yes"],
    { stdio: "ignore" }
  )
  const deadline = Date.now() + 10_000
  for (;;) {
    const ping = spawnSync("redis-cli", ["-p", String(chosen), "ping"], { encoding: "utf8" })
    if (ping.stdout?.trim() === "PONG") break
    if (Date.now() > deadline) {
      child.kill("SIGKILL")
      throw new Error(`redis-server did not start on port ${chosen}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return {
    url: `redis://127.0.0.1:${chosen}`,
    port: chosen,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve()
        child.once("exit", () => {
          rmSync(dir, { recursive: true, force: true })
          resolve()
        })
        child.kill("SIGTERM")
      })
  }
}
