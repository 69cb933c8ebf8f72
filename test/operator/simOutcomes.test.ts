import { type ChildProcess, spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type AnsweringAgent, startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { readUlawFile } from "../../sim/AudioSource.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import { type GatewayProcess, repoRoot, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"

const ADMIN = "dev-admin-key-change-me"
const reply = readUlawFile("examples/agents/audio/agent-greeting.ulaw").subarray(0, 40 * FRAME_BYTES)

interface Run {
  readonly child: ChildProcess
  readonly stdout: () => string
  readonly done: Promise<{ code: number | null; stdout: string; stderr: string }>
}

const run = (command: string, args: ReadonlyArray<string>, env: Record<string, string> = {}): Run => {
  const child = spawn(command, args, { cwd: repoRoot, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] })
  let stdout = ""
  let stderr = ""
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.once("close", (code) => resolve({ code, stdout, stderr }))
  )
  return { child, stdout: () => stdout, done }
}

const sim = (args: ReadonlyArray<string>) => run(process.execPath, ["--import", "tsx", "sim/cli.ts", ...args])

const api = async (gateway: GatewayProcess, method: string, path: string, body?: unknown) => {
  const response = await fetch(`${gateway.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body ? { "content-type": "application/json" } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {})
  })
  return { status: response.status, body: (await response.json()) as any }
}

const until = async (check: () => Promise<boolean> | boolean) => {
  while (!(await check())) await new Promise((resolve) => setTimeout(resolve, 100))
}

describe("callgate-sim outcomes against the real gateway", () => {
  let gateway: GatewayProcess
  let environmentId: string
  beforeAll(async () => {
    gateway = await spawnGateway({ ADMIN_API_KEY: ADMIN })
    await waitForHealthy(gateway)
    environmentId = (await api(gateway, "POST", "/v1/agents/sim-agent/environments", { name: "sim" })).body.data.id
  })
  afterAll(async () => {
    await gateway?.stop()
  })

  const common = () => ["--gateway", gateway.baseUrl, "--agent", "sim-agent", "--turns", "1", "--audio", "speech:600"]

  it("refused: an unknown environment; prints what the carrier was told; exit 0 only with --expect refused", async () => {
    const asDefault = await sim([...common(), "--environment", "env_nope"]).done
    expect(asDefault.stdout).toContain('the carrier was told: "This number is not in service.", then hang up')
    expect(asDefault.stdout).toContain("outcome: refused")
    expect(asDefault.code).toBe(1)
    const expected = await sim([...common(), "--environment", "env_nope", "--expect", "refused"]).done
    expect(expected.code).toBe(0)
  })

  it("rescued: no agent connected; prints the session id and why; exit 0 only with --expect rescued", async () => {
    const asDefault = await sim([...common(), "--environment", environmentId, "--key", ADMIN]).done
    expect(asDefault.stdout).toMatch(/session ses_[\w-]+: failed \(no_idle_agent\)/)
    expect(asDefault.stdout).toContain("rescued: no_idle_agent")
    expect(asDefault.stdout).toContain("outcome: rescued")
    expect(asDefault.code).toBe(1)
    const expected = await sim([...common(), "--environment", environmentId, "--key", ADMIN, "--expect", "rescued"]).done
    expect(expected.stdout).toContain("outcome: rescued")
    expect(expected.code).toBe(0)
  })

  it("answered: --wait-for-agent waits for an agent that dials in later, then every turn is answered", async () => {
    const waiting = sim([...common(), "--environment", environmentId, "--key", ADMIN, "--wait-for-agent", "--turns", "2"])
    await until(() => waiting.stdout().includes("waiting for an idle agent"))
    let agent: AnsweringAgent | undefined
    try {
      agent = await startAnsweringAgent({ gatewayUrl: gateway.baseUrl, agentId: "sim-agent", environmentId, apiKey: ADMIN, reply, responseLatencyMs: 50 })
      const result = await waiting.done
      expect(result.stdout).toMatch(/1 idle agent ready/)
      expect(result.stdout).toMatch(/session ses_[\w-]+: completed \(caller_hangup\); gateway-measured latency \d+ ms, \d+ ms/)
      expect(result.stdout).toContain("outcome: answered (2 of 2 turns answered)")
      expect(result.code).toBe(0)
      const asRescued = await sim([...common(), "--environment", environmentId, "--key", ADMIN, "--wait-for-agent", "--expect", "rescued"]).done
      expect(asRescued.stdout).toContain("outcome: answered")
      expect(asRescued.code).toBe(1)
    } finally {
      await agent?.close()
    }
  }, 240_000)

  it("the README's first-call block, as printed: no sleep, exits 0, and leaves no agent connected", async () => {
    const readme = readFileSync(join(repoRoot, "README.md"), "utf8")
    const section = readme.slice(readme.indexOf("## A first call on your machine"))
    const block = /```sh\n([\s\S]*?)```/.exec(section)![1]!
    expect(block).not.toContain("sleep")
    const result = await run("bash", ["-eo", "pipefail", "-c", block], { CALLGATE: gateway.baseUrl }).done
    expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0)
    expect(result.stdout).toContain("outcome: answered (2 of 2 turns answered)")
    expect(result.stdout).toMatch(/\{"data":\{"sessions":\[\{"id":"ses_/)
    // The agent the block started is gone: the environment it made has no idle agent left.
    const environments = (await api(gateway, "GET", "/v1/agents/demo-agent/environments")).body.data as Array<{ id: string }>
    expect(environments).toHaveLength(1)
    await until(async () => (await api(gateway, "GET", `/v1/agents/demo-agent/environments/${environments[0]!.id}/agents`)).body.data.idle === 0)
  }, 180_000)
})
