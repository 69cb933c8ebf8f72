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
export const spawnGateway = async (env: Record<string, string>): Promise<GatewayProcess> => {
  const port = env.PORT !== undefined ? Number(env.PORT) : await freePort()
  const given: Record<string, string> = {
    HOST: "127.0.0.1",
    PORT: String(port),
    DATA_DIR: env.DATA_DIR ?? mkdtempSync(join(tmpdir(), "callgate-data-")),
    ...env
  }
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...given },
    stdio: ["ignore", "pipe", "pipe"]
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
