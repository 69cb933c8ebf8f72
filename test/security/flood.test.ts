import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { audioFrames, type CarrierCall, dialInAgent, type Gateway, type Peer, startGateway, storedSession, twilioCall, until } from "../livecall/callHarness.js"
import { ADMIN_KEY, uniqueId } from "../support/testApp.js"

const FRAMES = 100
const callerFrames = audioFrames("caller-appointment-noisy.ulaw", FRAMES)
const callSid = () => `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`

interface LiveCall {
  readonly sid: string
  readonly agentId: string
  readonly carrier: CarrierCall
  readonly agent: Peer
  readonly sentAt: Array<number>
  readonly heardAt: Array<number>
}

const percentile = (values: Array<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}

describe("per-socket message rate limit", () => {
  let gateway: Gateway
  beforeAll(async () => {
    // Default limits: SOCKET_MESSAGE_RATE 200/s, SOCKET_MESSAGE_BURST 1000.
    gateway = await startGateway()
  })
  afterAll(() => gateway.close())

  const startCall = async (): Promise<LiveCall> => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "the agent in the pool")
    const sid = callSid()
    const carrier = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: sid }), callSid: sid })
    const heardAt: Array<number> = []
    agent.ws.on("message", (data) => {
      if (data.toString().includes('"event":"media"')) heardAt.push(performance.now())
    })
    carrier.start()
    await agent.waitForEvent("start")
    // The agent echoes every caller frame back, so both directions are counted.
    const streamSid = agent.events("start")[0].start.streamSid
    agent.ws.on("message", (data) => {
      const message = JSON.parse(data.toString())
      if (message.event === "media") agent.send({ event: "media", streamSid, media: { payload: message.media.payload } })
    })
    return { sid, agentId, carrier, agent, sentAt: [], heardAt }
  }

  const endedEvent = (sid: string) => gateway.outbox.events.find((e) => e.callId === sid)

  /** The flooding agent runs in its own process, as an attacker's would. */
  const startFloodingAgent = async (agentId: string, environmentId: string) => {
    const child = spawn(process.execPath, [fileURLToPath(new URL("./floodingAgent.mjs", import.meta.url)), `${gateway.wsBase}/v1/agents/${agentId}/environments/${environmentId}/connect`, ADMIN_KEY], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    const lines: Array<any> = []
    child.stdout.on("data", (chunk) => {
      for (const line of chunk.toString().split("\n")) if (line.trim()) lines.push(JSON.parse(line))
    })
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
    await until(() => lines.some((l) => l.open), "the flooding agent connected", 15_000)
    return { result: async () => (await exited, lines.find((l) => l.code !== undefined)), kill: () => child.kill("SIGKILL") }
  }

  it("ten calls keep every frame, in order, both ways, while one agent socket (another process) floods; the flooder is cut with 1008 and its call fails", async () => {
    // Warm-up: one call ended through the carrier's REST API, so the first use of the carrier SDK
    // (its modules load on first use) is not measured as the flood's effect.
    const warm = await startCall()
    warm.agent.send({ event: "hangup" })
    await until(() => endedEvent(warm.sid) !== undefined, "the warm-up call's end")

    const bystanders = await Promise.all(Array.from({ length: 10 }, startCall))
    const floodAgentId = uniqueId("agent")
    const floodEnv = await gateway.createEnvironment(floodAgentId)
    const flooder = await startFloodingAgent(floodAgentId, floodEnv.id)
    await until(() => gateway.idleAgents(floodAgentId, floodEnv.id) === 1, "the flooding agent in the pool")
    const floodSid = callSid()

    // Bystanders: one frame every 20 ms, as a carrier sends them; the flood starts halfway.
    const paced = Promise.all(
      bystanders.map(async (call) => {
        for (const frame of callerFrames) {
          call.sentAt.push(performance.now())
          call.carrier.media(frame)
          await new Promise((resolve) => setTimeout(resolve, 20))
        }
      })
    )
    await until(() => bystanders.every((call) => call.heardAt.length >= FRAMES / 2), "the bystanders halfway")
    const floodStartedAt = performance.now()
    const floodCall = await twilioCall(gateway, {
      token: gateway.issueToken({ agentId: floodAgentId, environmentId: floodEnv.id, kind: "twilio", callId: floodSid }),
      callSid: floodSid
    })
    floodCall.start()
    const flood = await flooder.result()
    await paced

    expect(flood.code).toBe(1008)
    expect(flood.reason).toMatch(/^message rate limit exceeded/)
    await until(() => endedEvent(floodSid) !== undefined, "the flooder's session.ended")
    expect(endedEvent(floodSid)).toMatchObject({ status: "failed", endReason: "agent_disconnected" })
    const flooderSession: any = await storedSession(gateway, floodAgentId, endedEvent(floodSid)!.sessionId)
    expect(flooderSession.fallback.errorMessage).toMatch(/message rate limit exceeded/)

    for (const call of bystanders) {
      await call.agent.waitForEvent("media", FRAMES, 15_000)
      await call.carrier.peer.waitForEvent("media", FRAMES, 15_000)
      expect(call.agent.events("media").map((m) => m.media.payload)).toEqual(callerFrames)
      expect(call.carrier.sentMedia()).toEqual(callerFrames)
      expect(call.agent.closed).toBeUndefined()
      expect(endedEvent(call.sid)).toBeUndefined()
    }
    const delays = (during: boolean) =>
      bystanders.flatMap((call) => call.heardAt.map((at, i) => ({ at: call.sentAt[i]!, delay: at - call.sentAt[i]! })).filter((d) => (d.at >= floodStartedAt) === during).map((d) => d.delay))
    const describeDelays = (values: Array<number>) =>
      `${values.length} frames, p50 ${percentile(values, 50).toFixed(1)} ms, p99 ${percentile(values, 99).toFixed(1)} ms, max ${Math.max(...values).toFixed(1)} ms`
    console.log(`bystander carrier->agent delay before the flood: ${describeDelays(delays(false))}`)
    console.log(`bystander carrier->agent delay from the flood on (${flood.sent} messages sent by the flooder before the cut): ${describeDelays(delays(true))}`)
    for (const call of bystanders) call.carrier.stop()
    await until(() => bystanders.every((call) => endedEvent(call.sid) !== undefined), "the bystanders' ends")
    expect(bystanders.map((call) => endedEvent(call.sid)!.status)).toEqual(Array(10).fill("completed"))
  })

  it("a carrier stream flooding mid-call is closed with 1008: a hard stream error", async () => {
    const call = await startCall()
    while (call.carrier.peer.ws.readyState === call.carrier.peer.ws.OPEN) {
      for (let i = 0; i < 200 && call.carrier.peer.ws.readyState === call.carrier.peer.ws.OPEN; i++) call.carrier.media(callerFrames[0]!)
      await new Promise((resolve) => setImmediate(resolve))
    }
    expect(await call.carrier.peer.done).toMatchObject({ code: 1008 })
    await until(() => endedEvent(call.sid) !== undefined, "session.ended")
    expect(endedEvent(call.sid)).toMatchObject({ status: "failed", endReason: "carrier_stream_error" })
  })

  it("the event loop's delay is a metric", async () => {
    const text = await (await fetch(`${gateway.httpBase}/metrics`)).text()
    for (const name of ["callgate_nodejs_eventloop_lag_seconds", "callgate_nodejs_eventloop_lag_p99_seconds", "callgate_nodejs_eventloop_lag_max_seconds"]) {
      expect(text).toMatch(new RegExp(`^${name} \\d`, "m"))
    }
    expect(text).toMatch(/^callgate_socket_limit_closes_total\{side="agent",limit="rate"\} [1-9]/m)
  })
})
