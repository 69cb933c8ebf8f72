import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { freePort } from "./redisServer.js"

/** The repository root: `node --import tsx` resolves tsx from here. */
export const repoRoot = fileURLToPath(new URL("../..", import.meta.url))

export interface GatewayProcess {
  readonly child: ChildProcess
  readonly port: number
  readonly baseUrl: string
  /** The variables it was started with (PATH and HOME aside). */
  readonly env: Readonly<Record<string, string>>
  /** Everything the process wrote so far. */
  readonly stdout: () => string
  readonly stderr: () => string
  /** Resolves with the exit code and signal once the process has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  /** Sends `signal` (SIGTERM by default) and waits for the exit; SIGKILL after `graceMs`. */
  readonly stop: (signal?: NodeJS.Signals, graceMs?: number) => Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

/**
 * Runs `node --import tsx src/main.ts` (the gateway exactly as `npm run dev` does) with only the
 * given variables plus PATH and HOME, so nothing from the test runner's environment (REDIS_URL)
 * leaks in. HOST and PORT default to loopback and a free port, DATA_DIR to a fresh temporary
 * directory (pass the same DATA_DIR to a restart that must find the previous run's spool and id).
 */
export const spawnGateway = (env: Record<string, string>): Promise<GatewayProcess> => spawnWith(env, [], "ignore")

const spawnWith = async (env: Record<string, string>, preload: ReadonlyArray<string>, stdin: "ignore" | "pipe"): Promise<GatewayProcess> => {
  const port = env.PORT !== undefined ? Number(env.PORT) : await freePort()
  const given: Record<string, string> = {
    HOST: "127.0.0.1",
    PORT: String(port),
    DATA_DIR: env.DATA_DIR ?? mkdtempSync(join(tmpdir(), "callgate-data-")),
    ...env
  }
  const child = spawn(process.execPath, ["--import", "tsx", ...preload.flatMap((file) => ["--import", file]), "src/main.ts"], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...given },
    stdio: [stdin, "pipe", "pipe"]
  })
  let stdout = ""
  let stderr = ""
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal }))
  )
  const stop = async (signal: NodeJS.Signals = "SIGTERM", graceMs = 15_000) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal)
    const timer = setTimeout(() => child.kill("SIGKILL"), graceMs)
    try {
      return await exited
    } finally {
      clearTimeout(timer)
    }
  }
  return { child, port, baseUrl: `http://127.0.0.1:${port}`, env: given, stdout: () => stdout, stderr: () => stderr, exited, stop }
}

/** What test/support/heldStart.ts writes on stderr once the app's modules are loaded. */
const HELD_MARK = "callgate-test: modules loaded, waiting for release"

export interface HeldGateway {
  readonly gateway: GatewayProcess
  /** Runs src/main.ts in the process (its whole start-up: config, store, registry, HTTP server). */
  readonly release: () => void
}

/**
 * A gateway process (as spawnGateway) with every module of the app already loaded, and
 * src/main.ts not yet run: it runs on `release()`. Resolves once the modules are loaded. A restart
 * test spawns it while the process it replaces still runs, then kills that one and releases this
 * one, so what follows the kill is the gateway's own start-up, not node loading and compiling the
 * app (8 s on a busy 2-core machine, against 1 s for the start-up itself).
 */
export const spawnHeldGateway = async (env: Record<string, string>, timeoutMs = 120_000): Promise<HeldGateway> => {
  const gateway = await spawnWith(env, [fileURLToPath(new URL("./heldStart.ts", import.meta.url))], "pipe")
  const deadline = Date.now() + timeoutMs
  while (!gateway.stderr().includes(HELD_MARK)) {
    if (gateway.child.exitCode !== null || gateway.child.signalCode !== null || Date.now() > deadline) {
      gateway.child.kill("SIGKILL")
      throw new Error(`held gateway did not load its modules\nstdout: ${gateway.stdout()}\nstderr: ${gateway.stderr()}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return { gateway, release: () => void gateway.child.stdin!.end("go\n") }
}

/** Polls `url` until it answers 200, the process exits, or `timeoutMs` passes. */
export const waitForHealthy = async (gateway: GatewayProcess, path = "/healthz", timeoutMs = 120_000) => {
  const deadline = Date.now() + timeoutMs
  let exited = false
  void gateway.exited.then(() => (exited = true))
  while (Date.now() < deadline && !exited) {
    try {
      const res = await fetch(`${gateway.baseUrl}${path}`)
      if (res.status === 200) return
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  throw new Error(`gateway did not become healthy on ${gateway.baseUrl}${path}\nstdout: ${gateway.stdout()}\nstderr: ${gateway.stderr()}`)
}
