/**
 * Child processes for the benchmark: every part runs in its own process (the system under test,
 * the carrier simulator, the agent simulator, the webhook/breaker/fallback parts), so none of them
 * borrows another's event loop. Control and results travel over the IPC channel as request/reply
 * messages; a child whose parent goes away exits by itself.
 */
import { type ChildProcess, execFileSync, fork, spawn, spawnSync } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

/** The repository root: `--import tsx` resolves from here. */
export const repoRoot = fileURLToPath(new URL("..", import.meta.url))

/** Every child started here, so none outlives the benchmark if it stops early (error, Ctrl-C). */
const children = new Set<ChildProcess>()
/** Stops `child` (SIGTERM) when this process exits, should nothing else have stopped it. */
export const track = (child: ChildProcess) => {
  if (children.size === 0) {
    process.once("exit", () => {
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGTERM")
    })
  }
  children.add(child)
  child.once("exit", () => children.delete(child))
  return child
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port
      server.close(() => resolve(port))
    })
  })

/** The last `max` characters a stream wrote (for error messages), without keeping everything. */
export const tailOf = (stream: NodeJS.ReadableStream | null | undefined, max = 8000) => {
  let tail = ""
  stream?.setEncoding?.("utf8")
  stream?.on("data", (chunk: string) => {
    tail = (tail + chunk).slice(-max)
  })
  return () => tail
}

interface Reply {
  readonly id: number
  readonly ok: boolean
  readonly result?: unknown
  readonly error?: string
}

/** A forked worker answering requests: `request(type, body)` resolves with its reply. */
export interface Worker {
  readonly child: ChildProcess
  readonly pid: number
  readonly request: <T>(type: string, body?: object, timeoutMs?: number) => Promise<T>
  readonly stderr: () => string
  /** Asks the worker to finish (`stop` request), then SIGTERM, then SIGKILL. */
  readonly stop: (graceMs?: number) => Promise<void>
}

/**
 * Forks `script` (a TypeScript file under the repository, run through tsx) with an IPC channel.
 * `nodeArgs` go before the script (e.g. --max-old-space-size).
 */
export const forkWorker = (script: string, options: { readonly nodeArgs?: ReadonlyArray<string>; readonly env?: Record<string, string> } = {}): Worker => {
  const child = track(fork(script, [], {
    cwd: repoRoot,
    execArgv: ["--import", "tsx", ...(options.nodeArgs ?? [])],
    env: { ...process.env, ...options.env },
    stdio: ["ignore", "inherit", "pipe", "ipc"]
  }))
  const stderr = tailOf(child.stderr)
  let nextId = 1
  const pending = new Map<number, { resolve: (value: any) => void; reject: (error: Error) => void; timer: NodeJS.Timeout }>()
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  child.on("message", (message: Reply) => {
    const waiter = pending.get(message.id)
    if (!waiter) return
    pending.delete(message.id)
    clearTimeout(waiter.timer)
    if (message.ok) waiter.resolve(message.result)
    else waiter.reject(new Error(message.error ?? "worker request failed"))
  })
  child.once("exit", (code, signal) => {
    for (const waiter of pending.values()) {
      clearTimeout(waiter.timer)
      waiter.reject(new Error(`${script} exited (${signal ?? code}) with requests pending\n${stderr()}`))
    }
    pending.clear()
  })
  const request = <T>(type: string, body: object = {}, timeoutMs = 120_000) =>
    new Promise<T>((resolve, reject) => {
      if (!child.connected) return reject(new Error(`${script} is not running\n${stderr()}`))
      const id = nextId++
      const timer = setTimeout(() => {
        pending.delete(id)
        reject(new Error(`${script}: no reply to ${type} within ${timeoutMs} ms`))
      }, timeoutMs)
      pending.set(id, { resolve, reject, timer })
      child.send({ id, type, ...body })
    })
  const stop = async (graceMs = 20_000) => {
    if (child.exitCode !== null || child.signalCode !== null) return
    await request("stop", {}, graceMs).catch(() => undefined)
    const term = setTimeout(() => child.kill("SIGTERM"), 2000)
    const kill = setTimeout(() => child.kill("SIGKILL"), 5000)
    await exited
    clearTimeout(term)
    clearTimeout(kill)
  }
  return { child, pid: child.pid!, request, stderr, stop }
}

/**
 * The worker side: answers each request with its handler's result. `stop` runs the handler (if
 * any), replies, and exits. Losing the parent (its IPC channel closes) exits at once.
 */
export const serveWorker = (handlers: Record<string, (body: any) => unknown>) => {
  process.on("disconnect", () => process.exit(0))
  process.on("message", async (message: { id: number; type: string }) => {
    const reply = (r: Omit<Reply, "id">) => process.connected && process.send!({ id: message.id, ...r })
    try {
      const handler = handlers[message.type]
      if (!handler && message.type !== "stop") throw new Error(`unknown request ${message.type}`)
      const result = handler ? await handler(message) : undefined
      reply({ ok: true, result })
      if (message.type === "stop") setTimeout(() => process.exit(0), 50)
    } catch (error) {
      reply({ ok: false, error: (error as Error).stack ?? String(error) })
    }
  })
}

/**
 * Runs a script as a plain child process (no IPC), e.g. the system under test: a `.ts` file under
 * the repository through tsx, or compiled JavaScript (see build.ts) on plain node. With `cpus`
 * (e.g. "0"), node runs on those cores only, from its first instruction (`taskset -c`, which
 * replaces itself with node: the pid is node's).
 */
export const spawnScript = (
  script: string,
  args: ReadonlyArray<string>,
  env: Record<string, string>,
  nodeArgs: ReadonlyArray<string> = [],
  cpus?: string
) => {
  const command = [process.execPath, ...nodeArgs, ...(script.endsWith(".ts") ? ["--import", "tsx"] : []), script, ...args]
  const [file, ...rest] = cpus === undefined ? command : ["taskset", "-c", cpus, ...command]
  return track(
    spawn(file!, rest, {
      cwd: repoRoot,
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
  )
}

// ---- cores: which this process may use, and pinning processes to some of them ----

/** The cores this process may run on (its affinity, from /proc/self/status), e.g. [0, 1]. */
export const allowedCpus = (): ReadonlyArray<number> => {
  const match = /^Cpus_allowed_list:\s*(\S+)$/m.exec(readFileSync("/proc/self/status", "utf8"))
  if (!match) throw new Error("cannot read this process's cores from /proc/self/status")
  return match[1]!.split(",").flatMap((range) => {
    const [from, to] = range.split("-").map(Number) as [number, number | undefined]
    return Array.from({ length: (to ?? from) - from + 1 }, (_, i) => from + i)
  })
}

/** Fails with a clear message when `taskset` (util-linux) is missing. */
export const requireTaskset = () => {
  if (spawnSync("taskset", ["--version"]).status !== 0) throw new Error("taskset is not installed (apt-get install util-linux)")
}

/** Moves a running process, all its threads, onto `cpus` (e.g. "2-3"); threads it starts later inherit them. */
export const pinProcess = (pid: number, cpus: string) => {
  const result = spawnSync("taskset", ["-a", "-c", "-p", cpus, String(pid)], { encoding: "utf8" })
  if (result.status !== 0) throw new Error(`taskset could not pin ${pid} to cores ${cpus}: ${result.stderr.trim()}`)
}

/** The pids whose parent is `pid` (nginx's workers), from /proc. */
export const childPidsOf = (pid: number): ReadonlyArray<number> =>
  readdirSync("/proc").flatMap((name) => {
    if (!/^\d+$/.test(name)) return []
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8")
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
      return ppid === pid ? [Number(name)] : []
    } catch {
      return [] // gone meanwhile
    }
  })

/**
 * A private `redis-server` on a free loopback port (nothing persisted), on `cpus` when given; with
 * `replicaOf`, a replica of the one on that port.
 * Stops by itself with the benchmark.
 */
export const startRedis = async (
  options: { readonly cpus?: string; readonly replicaOf?: number } = {}
): Promise<{ readonly url: string; readonly port: number; readonly pid: number; readonly stop: () => void }> => {
  if (spawnSync("redis-server", ["--version"]).status !== 0) throw new Error("redis-server is not installed; set REDIS_URL")
  const port = await freePort()
  // Its own directory: a replica writes the RDB its primary sends (never into the repository).
  const dir = mkdtempSync(join(tmpdir(), "callgate-bench-redis-"))
  const command = [
    "redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
    ...(options.replicaOf !== undefined ? ["--replicaof", "127.0.0.1", String(options.replicaOf)] : [])
  ]
  const [file, ...rest] = options.cpus === undefined ? command : ["taskset", "-c", options.cpus, ...command]
  const child = track(spawn(file!, rest, { stdio: "ignore" }))
  for (let i = 0; i < 200; i++) {
    if (spawnSync("redis-cli", ["-p", String(port), "ping"], { encoding: "utf8" }).stdout?.trim() === "PONG") {
      child.once("exit", () => rmSync(dir, { recursive: true, force: true }))
      return { url: `redis://127.0.0.1:${port}`, port, pid: child.pid!, stop: () => child.kill("SIGTERM") }
    }
    await sleep(50)
  }
  child.kill("SIGKILL")
  rmSync(dir, { recursive: true, force: true })
  throw new Error("redis-server did not start")
}

/** Waits for `child` to exit; SIGTERM first, SIGKILL after `graceMs`. */
export const stopChild = async (child: ChildProcess, graceMs = 15_000) => {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  child.kill("SIGTERM")
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs)
  await exited
  clearTimeout(timer)
}

// ---- /proc readings for a process the benchmark did not write (the system under test) ----

let clockTicks: number | undefined
const ticksPerSecond = () => {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100
    } catch {
      clockTicks = 100
    }
  }
  return clockTicks
}

/** CPU seconds (user + system, all threads) the process has used, from /proc/<pid>/stat. */
export const cpuSecondsOf = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond()
}

/**
 * CPU seconds the whole machine was busy or had taken from it (all cores: every process, the
 * kernel, and time the hypervisor stole), from the first line of /proc/stat.
 */
export const machineBusySeconds = (): number => {
  const [user, nice, system, , , irq, softirq, steal] = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number)
  return (user! + nice! + system! + irq! + softirq! + (steal ?? 0)) / ticksPerSecond()
}

/** Resident set size in bytes, from /proc/<pid>/status (VmRSS). */
export const rssBytesOf = (pid: number): number => {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
  return match ? Number(match[1]) * 1024 : NaN
}

/**
 * A part run on its own (`npx tsx bench/failover.ts --calls 100`): when `moduleUrl` is the script
 * node was started with, runs `run` with the numeric `--name value` arguments, prints its figures
 * as JSON and exits; imported by run.ts, does nothing.
 */
export const whenRunDirectly = async (moduleUrl: string, run: (arg: (name: string) => number | undefined) => Promise<unknown>) => {
  if (process.argv[1] === undefined || moduleUrl !== pathToFileURL(process.argv[1]).href) return
  const arg = (name: string) => {
    const i = process.argv.indexOf(`--${name}`)
    return i > 0 ? Number(process.argv[i + 1]) : undefined
  }
  const figures = await run(arg)
  process.stdout.write(JSON.stringify(figures, null, 2) + "\n")
  process.exit(0)
}
