import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"

/**
 * A port no other test process will be handed. The kernel's own pick (`listen(0)`) can give two
 * vitest workers the same just-freed port, and the second gateway to bind it loses the race to a
 * stranger that then answers its health check. So each worker (VITEST_POOL_ID) draws from its own
 * slice of 20000-31999, below the kernel's ephemeral range (where listen(0) and outgoing
 * connections take theirs), and a port is only handed out once it is seen free.
 */
const PORT_BASE = 20_000
const PORT_SLICE = 750
const worker = (Number(process.env.VITEST_POOL_ID ?? process.env.VITEST_WORKER_ID ?? 0) || 0) % 16
let nextInSlice = Math.floor(Math.random() * PORT_SLICE)

const bindable = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

export const freePort = async (): Promise<number> => {
  for (let attempt = 0; attempt < PORT_SLICE; attempt++) {
    const port = PORT_BASE + worker * PORT_SLICE + (nextInSlice++ % PORT_SLICE)
    if (await bindable(port)) return port
  }
  throw new Error(`no free port in this worker's slice ${PORT_BASE + worker * PORT_SLICE}+${PORT_SLICE}`)
}

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

export interface RestartableRedis extends RedisServer {
  /** Stops the server (what it holds is kept on disk); resolves once the port is closed. */
  readonly down: () => Promise<void>
  /** Starts it again on the same port with the same data; resolves once it answers PING. */
  readonly up: () => Promise<void>
  readonly isUp: () => boolean
}

/**
 * A private `redis-server` that can go away and come back with its data: an append-only file
 * fsynced on every write, in a directory kept across restarts, on a fixed port. For outage tests.
 */
export const startRestartableRedis = async (options: { readonly password?: string } = {}): Promise<RestartableRedis> => {
  if (spawnSync("redis-server", ["--version"]).status !== 0) {
    throw new Error("redis-server is not installed: install it (apt-get install redis-server) or set REDIS_URL")
  }
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), "callgate-redis-restartable-"))
  let child: ChildProcess | undefined
  const start = async () => {
    child = spawn(
      "redis-server",
      [
        "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", dir,
        "--protected-mode", "yes", ...(options.password !== undefined ? ["--requirepass", options.password] : [])
      ],
      { stdio: "ignore" }
    )
    const deadline = Date.now() + 20_000
    for (;;) {
      const auth = options.password !== undefined ? ["--no-auth-warning", "-a", options.password] : []
      const ping = spawnSync("redis-cli", ["-p", String(port), ...auth, "ping"], { encoding: "utf8" })
      if (ping.stdout?.trim() === "PONG") return
      if (Date.now() > deadline) throw new Error(`redis-server did not start on port ${port}`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
  const down = () =>
    new Promise<void>((resolve) => {
      const running = child
      child = undefined
      if (running === undefined || running.exitCode !== null) return resolve()
      running.once("exit", () => resolve())
      running.kill("SIGTERM")
    })
  await start()
  return {
    url: options.password !== undefined ? `redis://:${encodeURIComponent(options.password)}@127.0.0.1:${port}` : `redis://127.0.0.1:${port}`,
    port,
    down,
    up: start,
    isUp: () => child !== undefined,
    stop: async () => {
      await down()
      rmSync(dir, { recursive: true, force: true })
    }
  }
}
