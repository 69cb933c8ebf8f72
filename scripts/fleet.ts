/**
 * `npm run fleet`: a callgate fleet on this machine without docker (docs/scaling.md, "A fleet on
 * one machine"): Redis (a private `redis-server`, or REDIS_URL), three instances (INSTANCES) of
 * the built gateway, and Debian's nginx running deploy/nginx/callgate.conf moved onto loopback,
 * listening on FLEET_PORT (default 8080). Each instance's PUBLIC_URL is nginx's
 * `/i/{INSTANCE_ID}`, FLEET_URL nginx's address, TRUSTED_PROXIES nginx's. Every line an instance
 * logs is printed with its name in front. Runs until Ctrl-C, then stops everything it started.
 *
 *   ADMIN_API_KEY=dev-admin-key-change-me npm run fleet
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createInterface } from "node:readline"
import { type Nginx, startFleetNginx } from "../bench/nginx.js"
import { freePort, repoRoot } from "../bench/benchProcess.js"

const say = (message: string) => process.stdout.write(`fleet: ${message}\n`)
const fail = (message: string): never => {
  process.stderr.write(`fleet: ${message}\n`)
  process.exit(1)
}

const count = Number(process.env.INSTANCES ?? "3")
const fleetPort = Number(process.env.FLEET_PORT ?? "8080")
if (!Number.isInteger(count) || count < 1 || count > 3) fail(`INSTANCES must be 1, 2 or 3 (deploy/nginx/callgate.conf names three), got "${process.env.INSTANCES}"`)
if (!Number.isInteger(fleetPort) || fleetPort < 1 || fleetPort > 65535) fail(`FLEET_PORT must be a port number, got "${process.env.FLEET_PORT}"`)
const adminKey = process.env.ADMIN_API_KEY ?? fail("ADMIN_API_KEY is required (e.g. ADMIN_API_KEY=dev-admin-key-change-me npm run fleet)")
for (const tool of ["redis-server", "redis-cli"]) {
  if (process.env.REDIS_URL === undefined && spawnSync(tool, ["--version"]).status !== 0) fail(`${tool} is missing: apt-get install redis-server (or set REDIS_URL)`)
}
if (!["/usr/sbin/nginx", "nginx"].some((binary) => spawnSync(binary, ["-v"]).status === 0)) fail("nginx is missing: apt-get install nginx")

const started: Array<{ readonly name: string; readonly child: ChildProcess }> = []
const scratch = mkdtempSync(join(tmpdir(), "callgate-fleet-"))
let nginx: Nginx | undefined
let stopping = false

const stop = async (code: number) => {
  if (stopping) return
  stopping = true
  say("stopping: the instances drain, then nginx and Redis stop")
  const exited = (child: ChildProcess) => new Promise<void>((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once("exit", () => resolve())))
  const instances = started.filter((process) => process.name !== "redis")
  for (const { child } of instances) if (child.exitCode === null) child.kill("SIGTERM")
  await Promise.all(instances.map(({ child }) => exited(child)))
  await nginx?.stop()
  for (const { name, child } of started) if (name === "redis" && child.exitCode === null) child.kill("SIGTERM")
  await Promise.all(started.map(({ child }) => exited(child)))
  rmSync(scratch, { recursive: true, force: true })
  say("stopped")
  process.exit(code)
}
process.once("SIGINT", () => void stop(0))
process.once("SIGTERM", () => void stop(0))

const startRedis = async (): Promise<string> => {
  if (process.env.REDIS_URL !== undefined) return process.env.REDIS_URL
  const port = await freePort()
  const dir = join(scratch, "redis")
  mkdirSync(dir)
  const child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], { stdio: "ignore" })
  started.push({ name: "redis", child })
  const deadline = Date.now() + 10_000
  while (spawnSync("redis-cli", ["-p", String(port), "ping"], { encoding: "utf8" }).stdout?.trim() !== "PONG") {
    if (child.exitCode !== null || Date.now() > deadline) return fail(`redis-server did not start on 127.0.0.1:${port}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return `redis://127.0.0.1:${port}`
}

const main = async () => {
  say("building dist/ if a source changed (scripts/start.mjs --build-only)")
  if (spawnSync(process.execPath, ["scripts/start.mjs", "--build-only"], { cwd: repoRoot, stdio: "inherit" }).status !== 0) fail("the build failed")
  const redisUrl = await startRedis()
  say(`Redis at ${redisUrl}`)
  const ports = await Promise.all(Array.from({ length: count }, () => freePort()))
  try {
    nginx = await startFleetNginx(ports, { port: fleetPort, workerProcesses: "auto" })
  } catch (error) {
    await stop(1)
    return fail(`nginx did not start on 127.0.0.1:${fleetPort} (set FLEET_PORT to a free port): ${(error as Error).message}`)
  }
  const fleetUrl = nginx.baseUrl
  say(`nginx (deploy/nginx/callgate.conf) on ${fleetUrl}`)
  // One SECRETS_KEY for the whole fleet: session tokens and webhook secrets work on every instance.
  const secretsKey = process.env.SECRETS_KEY ?? randomBytes(32).toString("hex")
  const ready = ports.map(async (port, i) => {
    const id = `callgate-${i + 1}`
    const dataDir = join(scratch, id)
    mkdirSync(dataDir)
    const { FLEET_PORT: _port, INSTANCES: _count, ...inherited } = process.env
    const child = spawn(process.execPath, ["dist/src/main.js"], {
      cwd: repoRoot,
      env: {
        ...inherited,
        ADMIN_API_KEY: adminKey,
        HOST: "127.0.0.1",
        PORT: String(port),
        INSTANCE_ID: id,
        PUBLIC_URL: `${fleetUrl}/i/${id}`,
        FLEET_URL: fleetUrl,
        REDIS_URL: redisUrl,
        SECRETS_KEY: secretsKey,
        TRUSTED_PROXIES: "127.0.0.1",
        DATA_DIR: dataDir
      },
      stdio: ["ignore", "pipe", "pipe"]
    })
    started.push({ name: id, child })
    for (const stream of [child.stdout!, child.stderr!]) {
      createInterface({ input: stream }).on("line", (line) => process.stdout.write(`[${id}] ${line}\n`))
    }
    child.once("exit", (code, signal) => {
      if (!stopping) {
        say(`${id} exited (${signal ?? `code ${code}`}): stopping the fleet`)
        void stop(1)
      }
    })
    const deadline = Date.now() + 120_000
    for (;;) {
      try {
        if ((await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200) return
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error(`${id} was not ready within 120 s`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  })
  try {
    await Promise.all(ready)
  } catch (error) {
    say((error as Error).message)
    return stop(1)
  }
  say(`fleet ready on ${fleetUrl}: ${count} instances (${ports.map((port, i) => `callgate-${i + 1} on 127.0.0.1:${port}`).join(", ")}), one Redis, nginx in front`)
  say(`point carriers' webhooks and agents at ${fleetUrl}; GET ${fleetUrl}/v1/instances lists the instances; Ctrl-C stops everything`)
}

void main()
