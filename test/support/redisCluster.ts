import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort } from "./redisServer.js"

export interface RedisCluster {
  /** `redis-cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3` */
  readonly url: string
  /** `127.0.0.1:p1,...` as REDIS_CLUSTER_NODES takes it. */
  readonly nodes: string
  readonly ports: ReadonlyArray<number>
  /** The port of the primary that holds `key`'s slot now (it changes with a failover). */
  readonly primaryFor: (key: string) => number | undefined
  /** SIGKILLs the node on `port`; resolves once it has exited. */
  readonly kill: (port: number) => Promise<void>
  readonly stop: () => Promise<void>
}

const ping = (port: number) => spawnSync("redis-cli", ["-p", String(port), "ping"], { encoding: "utf8" }).stdout?.trim() === "PONG"

const clusterState = (port: number) =>
  /cluster_state:(\w+)/.exec(spawnSync("redis-cli", ["-p", String(port), "cluster", "info"], { encoding: "utf8" }).stdout ?? "")?.[1]

const replicasInSync = (port: number) => {
  const info = spawnSync("redis-cli", ["-p", String(port), "info", "replication"], { encoding: "utf8" }).stdout ?? ""
  return !/role:slave/.test(info) || /master_link_status:up/.test(info)
}

/**
 * A private Redis Cluster of `masters` primaries with `replicas` replicas each on free loopback
 * ports (nothing persisted): `redis-server --cluster-enabled yes` each, joined by `redis-cli
 * --cluster create --cluster-replicas`. A primary unreachable for 2 s (cluster-node-timeout) is
 * failed over to its replica. Resolves once every node reports cluster_state:ok and every replica
 * is in sync.
 */
export const startRedisCluster = async (masters = 3, replicas = 0): Promise<RedisCluster> => {
  if (spawnSync("redis-server", ["--version"]).status !== 0) throw new Error("redis-server is not installed (apt-get install redis-server)")
  const dir = mkdtempSync(join(tmpdir(), "callgate-redis-cluster-"))
  const ports: Array<number> = []
  const children: Array<ChildProcess> = []
  const byPort = new Map<number, ChildProcess>()
  const stop = async () => {
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve()
            child.once("exit", () => resolve())
            child.kill("SIGTERM")
          })
      )
    )
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    for (let i = 0; i < masters * (1 + replicas); i++) {
      let port = await freePort()
      // The cluster bus listens on port + 10000: both must be free.
      while (port > 55_000 || ports.includes(port)) port = await freePort()
      ports.push(port)
      children.push(
        spawn(
          "redis-server",
          [
            "--port", String(port),
            "--bind", "127.0.0.1",
            "--cluster-enabled", "yes",
            "--cluster-config-file", join(dir, `nodes-${port}.conf`),
            "--cluster-node-timeout", "2000",
            "--save", "",
            "--appendonly", "no",
            "--dir", dir
          ],
          { stdio: "ignore" }
        )
      )
      byPort.set(port, children[children.length - 1]!)
    }
    const deadline = Date.now() + 15_000
    while (!ports.every(ping)) {
      if (Date.now() > deadline) throw new Error(`redis-server nodes did not start on ${ports.join(", ")}`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    const created = spawnSync(
      "redis-cli",
      ["--cluster", "create", ...ports.map((port) => `127.0.0.1:${port}`), "--cluster-replicas", String(replicas), "--cluster-yes"],
      { encoding: "utf8" }
    )
    if (created.status !== 0) throw new Error(`redis-cli --cluster create failed: ${created.stdout}${created.stderr}`)
    while (!ports.every((port) => clusterState(port) === "ok" && replicasInSync(port))) {
      if (Date.now() > deadline + 15_000) throw new Error("the Redis Cluster did not reach cluster_state:ok")
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  } catch (error) {
    await stop()
    throw error
  }
  const nodes = ports.map((port) => `127.0.0.1:${port}`).join(",")
  const primaryFor = (key: string) => {
    const live = ports.filter((port) => byPort.get(port)?.exitCode === null && byPort.get(port)?.signalCode === null)
    for (const port of live) {
      const slot = spawnSync("redis-cli", ["-p", String(port), "cluster", "keyslot", key], { encoding: "utf8" }).stdout?.trim()
      const table = spawnSync("redis-cli", ["-p", String(port), "--json", "cluster", "slots"], { encoding: "utf8" }).stdout ?? ""
      if (slot === undefined || !/^\d+$/.test(slot) || table === "") continue
      const ranges = JSON.parse(table) as Array<[number, number, [string, number, string], ...Array<unknown>]>
      const owner = ranges.find(([from, to]) => Number(slot) >= from && Number(slot) <= to)
      if (owner !== undefined) return Number(owner[2][1])
    }
    return undefined
  }
  const kill = (port: number) =>
    new Promise<void>((resolve) => {
      const child = byPort.get(port)
      if (child === undefined || child.exitCode !== null || child.signalCode !== null) return resolve()
      child.once("exit", () => resolve())
      child.kill("SIGKILL")
    })
  return { url: `redis-cluster://${nodes}`, nodes, ports, primaryFor, kill, stop }
}
