/**
 * callgate as the demo runs it: a child process, `node --import tsx src/main.ts` (exactly what
 * `npm run dev` runs), on the embedded store. Its JSON log lines (one per line on stdout) are
 * parsed into an Inbox the demo waits on, so the narrative can show what callgate itself said.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { DemoFailure, Inbox, withTimeout } from "./steps.js"

/** The repository root: `node --import tsx` resolves tsx from its node_modules. */
const repoRoot = fileURLToPath(new URL("../..", import.meta.url))

/** One line of callgate's log (src/observability/Logging.ts): time, level, msg, then fields. */
export interface GatewayLog {
  readonly time: string
  readonly level: string
  readonly msg: string
  readonly [field: string]: unknown
}

export interface Exit {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

export interface DemoGateway {
  readonly baseUrl: string
  readonly pid: number | undefined
  readonly logs: Inbox<GatewayLog>
  readonly exited: Promise<Exit>
  /** Resolves once /readyz answers 200; fails when the process exits first or `timeoutMs` passes. */
  readonly ready: (timeoutMs: number) => Promise<void>
  /** SIGTERM (callgate drains and exits 0), SIGKILL after `graceMs`. */
  readonly stop: (graceMs?: number) => Promise<Exit>
  /** The last lines it wrote (stdout and stderr), for a failure message. */
  readonly tail: (lines?: number) => Array<string>
}

export const startGateway = (port: number, env: Readonly<Record<string, string>>): DemoGateway => {
  const baseUrl = `http://127.0.0.1:${port}`
  // Only what callgate needs: nothing from the caller's shell (REDIS_URL above all) leaks in.
  const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", HOST: "127.0.0.1", PORT: String(port), ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const logs = new Inbox<GatewayLog>()
  const recent: Array<string> = []
  const remember = (line: string) => {
    recent.push(line)
    if (recent.length > 200) recent.shift()
  }
  const lineReader = (onLine: (line: string) => void) => {
    let partial = ""
    return (chunk: string) => {
      const lines = (partial + chunk).split("\n")
      partial = lines.pop()!
      for (const line of lines) if (line.trim().length > 0) onLine(line)
    }
  }
  child.stdout!.setEncoding("utf8").on(
    "data",
    lineReader((line) => {
      remember(line)
      try {
        const parsed = JSON.parse(line) as GatewayLog
        if (typeof parsed === "object" && parsed !== null && typeof parsed.msg === "string") logs.push(parsed)
      } catch {
        // not a log line (tsx or Node warnings): kept for the failure tail only
      }
    })
  )
  child.stderr!.setEncoding("utf8").on("data", lineReader(remember))

  let hasExited = false
  const exited = new Promise<Exit>((resolve) =>
    child.once("exit", (code, signal) => {
      hasExited = true
      resolve({ code, signal })
    })
  )

  const ready = async (timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs
    while (!hasExited) {
      try {
        if ((await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(1000) })).status === 200) return
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new DemoFailure(`callgate did not become ready on ${baseUrl} within ${timeoutMs / 1000} s`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    const exit = await exited
    throw new DemoFailure(`callgate exited during start-up (code ${exit.code}${exit.signal ? `, ${exit.signal}` : ""})`)
  }

  const stop = async (graceMs = 15_000) => {
    if (!hasExited) child.kill("SIGTERM")
    try {
      return await withTimeout(exited, graceMs, "callgate to exit after SIGTERM")
    } catch {
      child.kill("SIGKILL")
      return exited
    }
  }

  return { baseUrl, pid: child.pid, logs, exited, ready, stop, tail: (lines = 15) => recent.slice(-lines) }
}
