import { type ChildProcess, spawn } from "node:child_process"
import { existsSync, statSync, utimesSync } from "node:fs"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { repoRoot } from "../support/gatewayProcess.js"
import { freePort } from "../support/redisServer.js"

const stamp = join(repoRoot, "dist", ".build-stamp")

/** `npm start` as package.json runs it (`node scripts/start.mjs`), with only `env` plus PATH and HOME. */
const start = (env: Record<string, string>) => {
  const child: ChildProcess = spawn(process.execPath, ["scripts/start.mjs"], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", HOST: "127.0.0.1", ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  let stdout = ""
  let stderr = ""
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
  return { child, exited, stdout: () => stdout, stderr: () => stderr }
}

const healthy = async (port: number, process: ReturnType<typeof start>) => {
  for (;;) {
    if (process.child.exitCode !== null) throw new Error(`exited: ${process.stderr()}`)
    try {
      if ((await fetch(`http://127.0.0.1:${port}/healthz`)).ok) return
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

describe("npm start", () => {
  it("reports a configuration error before building a stale tree", async () => {
    const before = existsSync(stamp) ? statSync(stamp).mtime : undefined
    // Stale: the stamp predates every source.
    if (before) utimesSync(stamp, new Date(0), new Date(0))
    try {
      const run = start({})
      expect(await run.exited).toBe(1)
      expect(run.stderr()).toBe("callgate: invalid configuration: ADMIN_API_KEY: is required but not set\n")
    } finally {
      if (before) utimesSync(stamp, before, before)
    }
  }, 120_000)

  it("builds only when a source changed: a second start of the same tree runs without building", async () => {
    const env = { ADMIN_API_KEY: "npm-start-test-admin-key" }
    // The first start builds when the tree is stale (a fresh clone), and not otherwise.
    const port1 = await freePort()
    const first = start({ ...env, PORT: String(port1) })
    await healthy(port1, first)
    first.child.kill("SIGTERM")
    expect(await first.exited).toBe(0)
    expect(existsSync(stamp)).toBe(true)

    const port2 = await freePort()
    const second = start({ ...env, PORT: String(port2) })
    await healthy(port2, second)
    second.child.kill("SIGTERM")
    expect(await second.exited).toBe(0)
    expect(second.stderr()).not.toContain("building")
    expect(second.stdout()).toContain('"msg":"callgate listening"')

    // `npm install` with nothing to do rewrites package-lock.json with the same bytes; an editor's
    // save without a change does the same to a source. Same content, newer times: still no build.
    const now = new Date()
    for (const file of ["package-lock.json", "src/main.ts"]) utimesSync(join(repoRoot, file), now, now)
    const port3 = await freePort()
    const third = start({ ...env, PORT: String(port3) })
    await healthy(port3, third)
    third.child.kill("SIGTERM")
    expect(await third.exited).toBe(0)
    expect(third.stderr()).not.toContain("building")
  }, 300_000)
})
