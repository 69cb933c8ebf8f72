import { afterEach, describe, expect, it } from "vitest"
import { type AnsweringAgent, startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { readUlawFile, silence } from "../../sim/AudioSource.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { freePort } from "../support/redisServer.js"

const ADMIN = "public-url-test-admin-key"
const callerTurn = readUlawFile("test/fixtures/audio/caller-appointment.ulaw").subarray(0, 110 * FRAME_BYTES)
const reply = readUlawFile("examples/agents/audio/agent-greeting.ulaw").subarray(0, 40 * FRAME_BYTES)

const logLines = (gateway: GatewayProcess) =>
  gateway
    .stdout()
    .trim()
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as { level: string; msg: string; publicUrl?: string; address?: string })

/** Waits until the process has written a log line matching `test`. */
const logLine = async (gateway: GatewayProcess, test: (line: { level: string; msg: string }) => boolean) => {
  for (;;) {
    const found = logLines(gateway).find(test)
    if (found) return found
    if (gateway.child.exitCode !== null) throw new Error(`gateway exited\n${gateway.stdout()}\n${gateway.stderr()}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

describe("PUBLIC_URL", () => {
  let gateway: GatewayProcess | undefined
  let agent: AnsweringAgent | undefined
  afterEach(async () => {
    await agent?.close()
    await gateway?.stop()
    agent = gateway = undefined
  })

  it("unset: a PORT-only start (HOST 0.0.0.0) hands out a stream URL on the port it listens on, and a call over it is answered", async () => {
    const port = await freePort()
    gateway = await spawnGateway({ ADMIN_API_KEY: ADMIN, HOST: "0.0.0.0", PORT: String(port) })
    await waitForHealthy(gateway)
    const derived = await logLine(gateway, (line) => line.msg.startsWith("PUBLIC_URL is not set"))
    expect(derived.msg).toContain(`http://127.0.0.1:${port}`)
    expect(derived.msg).toContain(`0.0.0.0:${port}`)
    expect(logLines(gateway).find((line) => line.msg === "callgate listening")).toMatchObject({ address: `0.0.0.0:${port}` })

    const created = await fetch(`${gateway.baseUrl}/v1/agents/demo-agent/environments`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "local" })
    })
    const environmentId = ((await created.json()) as { data: { id: string } }).data.id
    agent = await startAnsweringAgent({ gatewayUrl: gateway.baseUrl, agentId: "demo-agent", environmentId, apiKey: ADMIN, reply, responseLatencyMs: 50 })
    await agent.ready()

    // The stream URL is followed exactly as the TwiML gives it (as Twilio would).
    const call = await placeTwilioCall({ gatewayUrl: gateway.baseUrl, agentId: "demo-agent", environmentId, streamVia: "twiml" })
    expect(call.entry!.stream.url).toBe(`ws://127.0.0.1:${port}/telephony/twilio/stream`)
    const result = await call.turn(Buffer.concat([callerTurn, silence(200)]), { answerTimeoutMs: 60_000 })
    expect(result.answer.answered).toBe(true)
    expect(await call.hangup()).toMatchObject({ by: "simulator", code: 1000 })
  })

  it("set to this host on another port: a start-up warning names both", async () => {
    const port = await freePort()
    gateway = await spawnGateway({ ADMIN_API_KEY: ADMIN, PORT: String(port), PUBLIC_URL: "http://localhost:8080" })
    await waitForHealthy(gateway)
    const warning = await logLine(gateway, (line) => line.level === "warn" && line.msg.startsWith("PUBLIC_URL"))
    expect(warning.msg).toContain("http://localhost:8080")
    expect(warning.msg).toContain(`127.0.0.1:${port}`)
  })

  it("set to another host: no warning, stream URLs use it", async () => {
    gateway = await spawnGateway({ ADMIN_API_KEY: ADMIN, PUBLIC_URL: "https://gate.example.com" })
    await waitForHealthy(gateway)
    const listening = await logLine(gateway, (line) => line.msg === "callgate listening")
    expect(listening).toMatchObject({ publicUrl: "https://gate.example.com" })
    expect(logLines(gateway).filter((line) => line.msg.startsWith("PUBLIC_URL"))).toEqual([])
  })
})
