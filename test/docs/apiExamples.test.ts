import { spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { defaults } from "../../config/defaults.js"
import { apiRoutes } from "../../src/http/HttpApp.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { type GatewayProcess, repoRoot, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"

const doc = readFileSync(join(repoRoot, "docs/api.md"), "utf8")

/** The ```sh blocks, in order: the examples a reader runs. (```console blocks are only shown.) */
const shellBlocks = [...doc.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((match) => match[1]!)

/** Every variable AppConfig reads, from its source, and every one with a default. */
const configVariables = () => {
  const source = readFileSync(join(repoRoot, "src/config/AppConfig.ts"), "utf8")
  const read = [...source.matchAll(/\(\s*\[?"([A-Z][A-Z0-9_]+)"/g)].map((match) => match[1]!)
  return [...new Set([...Object.keys(defaults), ...read])]
}

/** Runs a bash script to its end (at most 120 s), keeping its output. */
const runBash = (script: string, cwd: string) =>
  new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn("bash", ["-c", script], { cwd, env: { PATH: process.env.PATH ?? "", HOME: cwd }, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    const timer = setTimeout(() => child.kill("SIGKILL"), 120_000)
    child.once("close", (status) => {
      clearTimeout(timer)
      resolve({ status, stdout, stderr })
    })
  })

describe("docs/api.md", () => {
  it("has a configuration row, with its default, for every variable in config/defaults.ts and AppConfig", () => {
    for (const variable of configVariables()) {
      const row = doc.split("\n").find((line) => line.startsWith(`| \`${variable}\` |`))
      expect(row, `docs/api.md has no configuration row for ${variable}`).toBeDefined()
      const value = (defaults as Record<string, unknown>)[variable]
      if (value !== undefined) expect(row, variable).toContain(`\`${String(value)}\``)
    }
  })

  it("has a curl example for every /v1 route of the route table, and the OpenAPI document", () => {
    const examples = shellBlocks.join("\n")
    for (const route of apiRoutes) {
      const path = route.path
        .replace(/:agentId/g, "$AGENT")
        .replace(/\/calls\/:sessionId/g, "/calls/$CALL_ID")
        .replace(/:environmentId/g, "\u0000")
        .replace(/:keyId/g, "$KEY_ID")
        .replace(/:sessionId/g, "ses_not_a_real_one")
        .replace(/:deliveryId/g, "dlv_not_a_real_one")
        .replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
        .replace(/\u0000/g, "\\$(ENV_ID|CLONE_ID)")
      const pattern = new RegExp(`curl[^\\n]*(\\\\\\n[^\\n]*)*${route.method === "GET" ? "" : `-X ${route.method}`}[\\s\\S]{0,80}"\\$BASE${path}(\\?[^"]*)?"`)
      expect(examples, `${route.method} ${route.path}`).toMatch(pattern)
    }
    expect(examples).toContain('"$BASE/v1/openapi.json"')
  })

  describe("its sh examples, run in order against a gateway started as the doc says", () => {
    let gateway: GatewayProcess
    let twilio: FakeTwilio
    let workDir: string
    beforeAll(async () => {
      // The outbound call examples place their call at a Twilio-compatible server on loopback.
      twilio = await startFakeTwilio()
      gateway = await spawnGateway({ ADMIN_API_KEY: "dev-admin-key-change-me", ...twilio.env })
      await waitForHealthy(gateway)
      workDir = mkdtempSync(join(tmpdir(), "callgate-docs-"))
    })
    afterAll(async () => {
      await gateway?.stop()
      await twilio?.close()
      if (workDir) rmSync(workDir, { recursive: true, force: true })
    })

    it("every block succeeds", async () => {
      expect(shellBlocks.length).toBeGreaterThanOrEqual(10)
      // One bash session, so later blocks see the variables earlier ones set. After each block a
      // marker line (on a line of its own: curl prints JSON without a final newline) says it got
      // through; `set -e` stops at the first failing command, `--fail-with-body` at an HTTP error.
      const script = [
        "set -euo pipefail",
        ...shellBlocks.flatMap((block, index) => [block.replaceAll("http://localhost:8080", gateway.baseUrl), `printf '\n::block-ok ${index}\n'`])
      ].join("\n")
      // Asynchronously: the fake Twilio server the outbound call examples reach runs in this process.
      const run = await runBash(script, workDir)
      const passed = [...run.stdout.matchAll(/^::block-ok (\d+)$/gm)].map((match) => Number(match[1]))
      const failed = shellBlocks.findIndex((_, index) => !passed.includes(index))
      const context = `block ${failed} failed:\n${shellBlocks[failed] ?? ""}\n--- stdout\n${run.stdout}\n--- stderr\n${run.stderr}`
      expect(run.status, context).toBe(0)
      expect(passed, context).toEqual(shellBlocks.map((_, index) => index))

      // The examples did what they say.
      expect(run.stdout).toContain('{"status":"ok"}')
      expect(run.stdout).toMatch(/^env_[A-Za-z0-9]+$/m)
      expect(run.stdout).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/m)
      expect(run.stdout).toMatch(/^204$/m)
      expect(run.stdout).toContain("/v1/agents/{agentId}/environments/{environmentId}/clone")
      expect(run.stdout).toContain('"code":"VALIDATION_FAILED"')
      expect(run.stdout).toContain('"code":"FORBIDDEN"')
      expect(run.stdout).toContain('"code":"UNAUTHORIZED"')
      expect(run.stdout).toMatch(/^queued$/m)
      expect(run.stdout).toMatch(/^canceled$/m)
      expect(twilio.createdCalls().map((call) => call.form?.To)).toEqual(["+14155550142"])
      expect(twilio.callUpdates().map((update) => update.form)).toEqual([{ Status: "canceled" }])
    })
  })
})
