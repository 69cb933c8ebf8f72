import { type ChildProcess, spawn } from "node:child_process"
import { afterEach, describe, expect, it } from "vitest"
import { startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { readUlawFile } from "../../sim/AudioSource.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"

const ADMIN = "local-carrier-test-admin-key"
const reply = readUlawFile("test/fixtures/audio/agent-greeting.ulaw").subarray(20 * FRAME_BYTES, 40 * FRAME_BYTES)

/** `callgate-sim carrier` as the docs run it, on a free port; resolves once it printed its env line. */
const startCarrierCli = async (args: Array<string>) => {
  const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", "sim/cli.ts", "carrier", "--port", "0", ...args], { stdio: ["ignore", "pipe", "pipe"] })
  let stdout = ""
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
  for (;;) {
    const line = /TWILIO_ACCOUNT_SID=(\S+) TWILIO_AUTH_TOKEN=(\S+) TWILIO_API_BASE_URL=(\S+)/.exec(stdout)
    if (line) {
      return { child, exited, output: () => stdout, env: { TWILIO_ACCOUNT_SID: line[1]!, TWILIO_AUTH_TOKEN: line[2]!, TWILIO_API_BASE_URL: line[3]! } }
    }
    if (child.exitCode !== null) throw new Error(`the carrier exited: ${stdout}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

const api = (gateway: GatewayProcess) => async (method: string, path: string, body?: unknown) => {
  const response = await fetch(`${gateway.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {})
  })
  return { status: response.status, body: (await response.json()) as any }
}

const until = async <A>(read: () => Promise<A | undefined>, what: string, timeoutMs = 60_000): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

describe("callgate-sim carrier: outbound calls end to end on one machine", () => {
  const cleanup: Array<() => Promise<unknown>> = []
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step()
  })

  const setup = async (carrierArgs: Array<string>) => {
    const carrier = await startCarrierCli(carrierArgs)
    cleanup.push(async () => {
      if (carrier.child.exitCode === null) carrier.child.kill("SIGTERM")
      return carrier.exited
    })
    const gateway = await spawnGateway({ ADMIN_API_KEY: ADMIN, ...carrier.env })
    cleanup.push(() => gateway.stop())
    await waitForHealthy(gateway)
    const call = api(gateway)
    const environment = await call("POST", "/v1/agents/outbound-agent/environments", { name: "local" })
    expect(environment.status).toBe(201)
    return { carrier, gateway, call, environmentId: environment.body.data.id as string }
  }

  it("places a call through it: it rings, answers with the call's TwiML, streams, and the agent answers both callee turns", async () => {
    const { carrier, gateway, call, environmentId } = await setup(["--turns", "2", "--audio", "speech:600", "--pause", "100"])
    const agent = await startAnsweringAgent({ gatewayUrl: gateway.baseUrl, agentId: "outbound-agent", environmentId, apiKey: ADMIN, reply, responseLatencyMs: 50 })
    cleanup.push(() => agent.close())
    await agent.ready()
    const starts: Array<Record<string, string>> = []
    agent.on("call", (start) => starts.push({ ...start.customParameters, callSid: start.callSid, accountSid: start.accountSid }))

    const placed = await call("POST", `/v1/agents/outbound-agent/environments/${environmentId}/calls`, {
      to: "+14155550142",
      from: "+14155550199",
      provider: "twilio",
      metadata: { campaign: "local" }
    })
    expect(placed.status).toBe(201)
    const sessionId = placed.body.data.id as string
    const ended = await until(async () => {
      const { body } = await call("GET", `/v1/agents/outbound-agent/sessions/${sessionId}`)
      return body.data.status === "completed" ? body.data : undefined
    }, "the session to complete")
    expect(ended).toMatchObject({ direction: "outbound", provider: "twilio", to: "+14155550142", from: "+14155550199", callId: placed.body.data.callId })
    expect(ended.turns).toHaveLength(2)
    expect(ended.turns.every((turn: { latencyMs: number | null }) => turn.latencyMs !== null)).toBe(true)
    // The agent's callSid and accountSid are those of callgate's call-control API (docs/calls.md), not the carrier's.
    expect(starts).toEqual([expect.objectContaining({ sessionId, direction: "outbound", campaign: "local", callSid: sessionId, accountSid: expect.stringMatching(/^AC/) })])
    await until(async () => (carrier.output().includes(`call ${placed.body.data.callId} ended: completed`) ? true : undefined), "the carrier's end of the call")
    expect(carrier.output()).toMatch(/status callback ringing answered HTTP 2\d\d/)
    expect(carrier.output()).toMatch(/turn 2 answered after \d+ ms/)
  }, 120_000)

  it("reports a busy callee: the session fails with endReason busy, and no agent is involved", async () => {
    const { call, environmentId } = await setup(["--behaviour", "busy"])
    const placed = await call("POST", `/v1/agents/outbound-agent/environments/${environmentId}/calls`, { to: "+14155550142", from: "+14155550199" })
    expect(placed.status).toBe(201)
    const ended = await until(async () => {
      const { body } = await call("GET", `/v1/agents/outbound-agent/sessions/${placed.body.data.id}`)
      return body.data.status === "failed" ? body.data : undefined
    }, "the session to fail")
    expect(ended.endReason).toBe("busy")
  }, 120_000)

  it("cancels a ringing call when callgate is asked to (DELETE .../calls/{id})", async () => {
    const { carrier, call, environmentId } = await setup(["--ring", "60000"])
    const placed = await call("POST", `/v1/agents/outbound-agent/environments/${environmentId}/calls`, { to: "+14155550142", from: "+14155550199" })
    await until(async () => (carrier.output().includes("status callback ringing") ? true : undefined), "ringing")
    const canceled = await call("DELETE", `/v1/agents/outbound-agent/environments/${environmentId}/calls/${placed.body.data.id}`)
    expect(canceled.status).toBe(200)
    const ended = await until(async () => {
      const { body } = await call("GET", `/v1/agents/outbound-agent/sessions/${placed.body.data.id}`)
      return body.data.status === "failed" ? body.data : undefined
    }, "the session to end")
    expect(ended.endReason).toBe("canceled")
    await until(async () => (carrier.output().includes("ended: canceled") ? true : undefined), "the carrier's cancel")
  }, 120_000)
})
