/**
 * The two systems the benchmark measures, each started as its own process on loopback: callgate
 * (its entry point, embedded in-memory store) and the bare `ws` relay (bench/baselineRelay.ts).
 * With `build` (see build.ts) both run as compiled JavaScript on plain node, as `npm start` runs
 * callgate; without it, from the sources through tsx, as `npm run dev` does. Both expose the pid
 * for /proc readings and stop by themselves.
 */
import { join } from "node:path"
import { type ChildProcess } from "node:child_process"
import { randomBytes } from "node:crypto"
import { freePort, sleep, spawnScript, stopChild, tailOf } from "./benchProcess.js"
import { INSPECT_FLAG, inspectorUrlFrom } from "./inspector.js"

export interface RunningSystem {
  readonly name: "gateway" | "baseline"
  readonly pid: number
  readonly child: ChildProcess
  readonly stderr: () => string
  /** The inspector's ws:// URL when started with `inspect` (memory readings, see inspector.ts). */
  readonly inspectorUrl?: string
  readonly stop: () => Promise<void>
}

export interface RunningRelay extends RunningSystem {
  readonly name: "baseline"
  /** ws://127.0.0.1:port: carriers dial /carrier/<key>, agents /agent/<key>. */
  readonly url: string
}

export interface RunningGateway extends RunningSystem {
  readonly name: "gateway"
  /** http://127.0.0.1:port (also its PUBLIC_URL). */
  readonly baseUrl: string
  readonly adminKey: string
  readonly stdout: () => string
}

export interface StartOptions {
  /** The compiled tree from buildForBench(); default: the sources through tsx. */
  readonly build?: string
  /** Open the inspector on a free loopback port (memory readings). */
  readonly inspect?: boolean
}

/**
 * Node flags for both systems from BENCH_NODE_ARGS (space-separated), e.g. "--perf-basic-prof"
 * so that `perf record` names the JIT-compiled functions of the relay and of callgate alike.
 */
const benchNodeArgs = (): Array<string> => (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter((arg) => arg !== "")

const entry = (build: string | undefined, path: string) => (build ? join(build, path.replace(/\.ts$/, ".js")) : path)

export const startBaselineRelay = async (options: StartOptions = {}): Promise<RunningRelay> => {
  const child = spawnScript(entry(options.build, "bench/baselineRelay.ts"), ["--port", "0"], {}, [
    ...benchNodeArgs(),
    ...(options.inspect ? [INSPECT_FLAG] : [])
  ])
  const stderr = tailOf(child.stderr)
  const inspectorUrl = options.inspect ? inspectorUrlFrom(child.stderr!) : undefined
  const port = await new Promise<number>((resolve, reject) => {
    let buffer = ""
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      buffer += chunk
      const line = buffer.split("\n").find((l) => l.includes('"ready"'))
      if (line) resolve((JSON.parse(line) as { port: number }).port)
    })
    child.once("exit", (code) => reject(new Error(`the baseline relay exited (${code}) before it was ready\n${stderr()}`)))
  })
  return {
    name: "baseline",
    pid: child.pid!,
    child,
    stderr,
    url: `ws://127.0.0.1:${port}`,
    ...(inspectorUrl ? { inspectorUrl: await inspectorUrl } : {}),
    stop: () => stopChild(child, 5000)
  }
}

export interface GatewayOptions extends StartOptions {
  /** Extra settings (e.g. TWILIO_API_BASE_URL for a fake Twilio). */
  readonly env?: Readonly<Record<string, string>>
  /** Node flags before the entry point, e.g. --cpu-prof. */
  readonly nodeArgs?: ReadonlyArray<string>
  /** Listen on this port (default: a free one); a fleet's nginx is configured with it first. */
  readonly port?: number
  /** The admin key (default: a random one); a fleet's instances share one. */
  readonly adminKey?: string
  /** Run on these cores only (`taskset -c`, e.g. "0"): one instance per core. */
  readonly cpus?: string
}

/**
 * Starts callgate with the embedded store on a free loopback port, its PUBLIC_URL pointing at
 * itself (so the TwiML's stream URL is reachable), the /v1 rate limit off (hundreds of agent
 * sockets dial in at once) and a short shutdown drain. Resolves once /healthz answers.
 */
export const startGateway = async (options: GatewayOptions = {}): Promise<RunningGateway> => {
  const port = options.port ?? (await freePort())
  const baseUrl = `http://127.0.0.1:${port}`
  const adminKey = options.adminKey ?? `bench-admin-${randomBytes(12).toString("hex")}`
  const child = spawnScript(
    entry(options.build, "src/main.ts"),
    [],
    {
      HOST: "127.0.0.1",
      PORT: String(port),
      PUBLIC_URL: baseUrl,
      ADMIN_API_KEY: adminKey,
      RATE_LIMIT_PER_MINUTE: "0",
      SHUTDOWN_DRAIN_TIMEOUT: "3s",
      LOG_LEVEL: "info",
      ...options.env
    },
    [...benchNodeArgs(), ...(options.nodeArgs ?? []), ...(options.inspect ? [INSPECT_FLAG] : [])],
    options.cpus
  )
  const stdout = tailOf(child.stdout, 20_000)
  const stderr = tailOf(child.stderr)
  const inspectorUrl = options.inspect ? inspectorUrlFrom(child.stderr!) : undefined
  let exited = false
  child.once("exit", () => (exited = true))
  const deadline = Date.now() + 60_000
  for (;;) {
    if (exited) throw new Error(`callgate exited before it was healthy\n${stdout()}\n${stderr()}`)
    if (Date.now() > deadline) {
      await stopChild(child, 2000)
      throw new Error(`callgate was not healthy on ${baseUrl} after 60 s\n${stdout()}\n${stderr()}`)
    }
    const healthy = await fetch(`${baseUrl}/healthz`).then(
      (res) => res.status === 200,
      () => false
    )
    if (healthy) break
    await sleep(100)
  }
  return {
    name: "gateway",
    pid: child.pid!,
    child,
    baseUrl,
    adminKey,
    stdout,
    stderr,
    ...(inspectorUrl ? { inspectorUrl: await inspectorUrl } : {}),
    stop: () => stopChild(child, 15_000)
  }
}

/** One /v1 request with the admin key; throws with the error envelope on a non-2xx answer. */
export const adminApi = async <T>(gateway: Pick<RunningGateway, "baseUrl" | "adminKey">, method: string, path: string, body?: object): Promise<T> => {
  const res = await fetch(`${gateway.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${gateway.adminKey}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined
  })
  const text = await res.text()
  if (!res.ok) throw new Error(`${method} ${path} answered ${res.status}: ${text}`)
  return (JSON.parse(text) as { data: T }).data
}

/** An environment for `agentId` (settings as the PATCH body takes them) and an API key scoped to that agent. */
export const createBenchEnvironment = async (gateway: Pick<RunningGateway, "baseUrl" | "adminKey">, agentId: string, settings: object = {}) => {
  const environment = await adminApi<{ id: string }>(gateway, "POST", `/v1/agents/${agentId}/environments`, { name: "bench" })
  if (Object.keys(settings).length > 0) await adminApi(gateway, "PATCH", `/v1/agents/${agentId}/environments/${environment.id}`, settings)
  const key = await adminApi<{ key: string }>(gateway, "POST", "/v1/api-keys", { name: `bench ${agentId}`, agentIds: [agentId] })
  return { environmentId: environment.id, apiKey: key.key }
}
