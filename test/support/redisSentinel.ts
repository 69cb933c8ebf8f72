import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort } from "./redisServer.js"

/**
 * A private Redis primary, its replica and three sentinels (Debian's `redis-sentinel`) on free
 * loopback ports, everything password-protected, nothing persisted. The sentinels fail over after
 * 1 s without an answer (quorum 2). `kill` SIGKILLs a data node by role; `primaryPort` asks the
 * sentinels who the primary is now.
 */
export interface RedisSentinelSet {
  /** `host:port,...` of the sentinels, as REDIS_SENTINELS takes it. */
  readonly sentinels: string
  readonly name: string
  readonly password: string
  readonly sentinelPassword: string
  /** The gateway's settings for this set (REDIS_SENTINELS, REDIS_SENTINEL_NAME, the passwords). */
  readonly env: Record<string, string>
  readonly ports: { readonly primary: number; readonly replica: number; readonly sentinels: ReadonlyArray<number> }
  /** The primary's port as the sentinels report it now. */
  readonly primaryPort: () => number | undefined
  /** SIGKILLs the data node on `port`; resolves once it has exited. */
  readonly kill: (port: number) => Promise<void>
  /** SIGSTOPs / SIGCONTs the data node on `port` (a replica that stops answering). */
  readonly pause: (port: number) => void
  readonly resume: (port: number) => void
  readonly stop: () => Promise<void>
}

const cli = (port: number, password: string, ...args: Array<string>) =>
  spawnSync("redis-cli", ["-p", String(port), "--no-auth-warning", "-a", password, ...args], { encoding: "utf8" }).stdout?.trim() ?? ""

const waitFor = async (check: () => boolean, what: string, ms = 20_000) => {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`redis sentinel set: timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

export const startRedisSentinelSet = async (): Promise<RedisSentinelSet> => {
  if (spawnSync("redis-sentinel", ["--version"]).status !== 0) throw new Error("redis-sentinel is not installed (apt-get install redis-sentinel)")
  const dir = mkdtempSync(join(tmpdir(), "callgate-redis-sentinel-"))
  const name = "callgate-primary"
  const password = "sentinel-data-pw"
  const sentinelPassword = "sentinel-own-pw"
  const children = new Map<number, ChildProcess>()
  const stop = async () => {
    await Promise.all(
      [...children.values()].map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve()
            child.once("exit", () => resolve())
            child.kill("SIGCONT")
            child.kill("SIGTERM")
          })
      )
    )
    rmSync(dir, { recursive: true, force: true })
  }
  const dataNode = (port: number, replicaOf?: number) =>
    spawn(
      "redis-server",
      [
        "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
        "--requirepass", password, "--masterauth", password,
        ...(replicaOf !== undefined ? ["--replicaof", "127.0.0.1", String(replicaOf)] : [])
      ],
      { stdio: "ignore" }
    )
  try {
    const primary = await freePort()
    let replica = await freePort()
    while (replica === primary) replica = await freePort()
    children.set(primary, dataNode(primary))
    children.set(replica, dataNode(replica, primary))
    await waitFor(() => /master_link_status:up/.test(cli(replica, password, "info", "replication")), "the replica in sync")
    const sentinelPorts: Array<number> = []
    while (sentinelPorts.length < 3) {
      const port = await freePort()
      if (port !== primary && port !== replica && !sentinelPorts.includes(port)) sentinelPorts.push(port)
    }
    for (const port of sentinelPorts) {
      const conf = join(dir, `sentinel-${port}.conf`)
      writeFileSync(
        conf,
        [
          `port ${port}`,
          "bind 127.0.0.1",
          `dir ${dir}`,
          `requirepass ${sentinelPassword}`,
          `sentinel sentinel-pass ${sentinelPassword}`,
          `sentinel monitor ${name} 127.0.0.1 ${primary} 2`,
          `sentinel auth-pass ${name} ${password}`,
          `sentinel down-after-milliseconds ${name} 1000`,
          `sentinel failover-timeout ${name} 5000`,
          `sentinel parallel-syncs ${name} 1`,
          ""
        ].join("\n")
      )
      children.set(port, spawn("redis-sentinel", [conf], { stdio: "ignore" }))
    }
    // Every sentinel knows the replica and the two other sentinels before anything is killed.
    await waitFor(
      () =>
        sentinelPorts.every((port) => {
          const info = cli(port, sentinelPassword, "sentinel", "master", name)
          return /num-slaves\s+1/.test(info) && /num-other-sentinels\s+2/.test(info)
        }),
      "three sentinels that see the replica and each other",
      30_000
    )
    const sentinels = sentinelPorts.map((port) => `127.0.0.1:${port}`).join(",")
    const primaryPort = () => {
      for (const port of sentinelPorts) {
        const answer = cli(port, sentinelPassword, "sentinel", "get-master-addr-by-name", name).split("\n")
        if (answer.length === 2 && /^\d+$/.test(answer[1]!)) return Number(answer[1])
      }
      return undefined
    }
    return {
      sentinels,
      name,
      password,
      sentinelPassword,
      env: { REDIS_SENTINELS: sentinels, REDIS_SENTINEL_NAME: name, REDIS_PASSWORD: password, REDIS_SENTINEL_PASSWORD: sentinelPassword },
      ports: { primary, replica, sentinels: sentinelPorts },
      primaryPort,
      kill: (port) =>
        new Promise<void>((resolve) => {
          const child = children.get(port)
          if (child === undefined || child.exitCode !== null || child.signalCode !== null) return resolve()
          child.once("exit", () => resolve())
          child.kill("SIGKILL")
        }),
      pause: (port) => void children.get(port)?.kill("SIGSTOP"),
      resume: (port) => void children.get(port)?.kill("SIGCONT"),
      stop
    }
  } catch (error) {
    await stop()
    throw error
  }
}
