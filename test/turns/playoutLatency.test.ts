import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { AgentCall } from "../../examples/agents/agent-runtime.js"
import { type AnsweringAgent, startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { readUlawFile, speechLike } from "../../sim/AudioSource.js"
import { twilioSid } from "../../sim/CallEntry.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import type { SimCall } from "../../sim/SimCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type Gateway, startGateway, until } from "../livecall/callHarness.js"
import { ADMIN_KEY, adminAuth, uniqueId } from "../support/testApp.js"

/**
 * Latency at playout on a real call: the simulated Twilio carrier plays the agent's audio in real
 * time behind a known playout delay (its jitter buffer), and echoes each mark once the audio before
 * it has played, as Twilio does. callgate places its own mark after the first voiced frame of each
 * answer; the turn's `playedLatencyMs` is when the caller heard the answer begin. The agent sees
 * only its own marks. A `clear` before callgate's mark came back counts as not played.
 */

const PLAYOUT_DELAY_MS = 1500
/** callgate reads arrival times in whole frames and rounds the record to whole ms. */
const SLACK_MS = 25
const greeting = readUlawFile("examples/agents/audio/agent-greeting.ulaw")
const reply = greeting.subarray(5 * FRAME_BYTES, 45 * FRAME_BYTES)

describe("latency at playout", () => {
  let gateway: Gateway
  let agent: AnsweringAgent | undefined
  let call: SimCall | undefined

  beforeAll(async () => {
    gateway = await startGateway({})
  })
  afterAll(async () => {
    await call?.hangup()
    await agent?.close()
    await gateway.close()
  })

  it("is confirmed by callgate's own mark after a known playout delay; the agent sees none of callgate's marks; a clear first means not played", async () => {
    const agentId = uniqueId("agent")
    const { id: environmentId } = await gateway.createEnvironment(agentId)
    agent = await startAnsweringAgent({ gatewayUrl: gateway.httpBase, agentId, environmentId, apiKey: ADMIN_KEY, reply, responseLatencyMs: 100 })
    await agent.ready()
    const agentMarks: Array<string> = []
    agent.on("mark", ({ name }) => agentMarks.push(name))
    let agentCall: AgentCall | undefined
    agent.on("callerMedia", (_frame, _at, current) => (agentCall = current))
    const sent: Array<number> = []
    agent.on("audioSent", ({ turn }) => sent.push(turn))

    const callSid = twilioSid("CA")
    call = await placeTwilioCall({
      gatewayUrl: gateway.httpBase,
      agentId,
      environmentId,
      callSid,
      to: "+15550100002",
      streamVia: "gateway",
      authToken: gateway.twilio.authToken,
      publicUrl: "https://callgate.test",
      playoutDelayMs: PLAYOUT_DELAY_MS
    })
    const carrierMarks: Array<{ name: string; cleared: boolean }> = []
    call.on("markEchoed", ({ name, cleared }) => carrierMarks.push({ name, cleared }))
    const sessionId = await until(() => agentCall !== undefined, "the agent's call").then(() => agentCall!.started!.customParameters.sessionId!)
    const turns = async () =>
      ((await (await fetch(`${gateway.httpBase}/v1/agents/${agentId}/sessions/${sessionId}`, { headers: adminAuth })).json()) as any).data.turns as Array<any>
    const turnsNow: { value: Array<any> } = { value: [] }
    const waitTurns = async (check: (turns: Array<any>) => boolean, what: string) => {
      const deadline = Date.now() + 30_000
      for (;;) {
        turnsNow.value = await turns()
        if (check(turnsNow.value)) return turnsNow.value
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(turnsNow.value)}`)
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    }

    // Two turns, each answer heard PLAYOUT_DELAY_MS after it reached the carrier.
    for (const index of [1, 2]) {
      await call.play(speechLike({ durationMs: 1600 }))
      await waitTurns((t) => typeof t[index - 1]?.playedLatencyMs === "number", `turn ${index} played`)
    }
    for (const turn of turnsNow.value.slice(0, 2)) {
      expect(turn.latencyMs).toEqual(expect.any(Number))
      expect(turn.playedLatencyMs).toBeGreaterThanOrEqual(turn.latencyMs + PLAYOUT_DELAY_MS - SLACK_MS)
    }
    expect(carrierMarks.filter((m) => m.name.startsWith("callgate:"))).toEqual([
      { name: "callgate:played:1", cleared: false },
      { name: "callgate:played:2", cleared: false }
    ])

    // Turn 3: the agent clears its answer while callgate's mark waits behind the playout delay.
    const marksBefore = call.stats.marksReceived
    await call.play(speechLike({ durationMs: 1600 }))
    await until(() => sent.includes(3), "the agent's third answer")
    await until(() => call!.stats.marksReceived > marksBefore, "callgate's mark for turn 3 at the carrier")
    agentCall!.clear()
    await until(() => carrierMarks.some((m) => m.name === "callgate:played:3"), "the cleared mark returned")
    expect(carrierMarks.find((m) => m.name === "callgate:played:3")).toEqual({ name: "callgate:played:3", cleared: true })
    const [, , third] = await waitTurns((t) => t[2]?.latencyMs !== null && t[2]?.latencyMs !== undefined, "turn 3 answered")
    expect(third.playedLatencyMs).toBeNull()

    // The agent got its own marks back, and none of callgate's.
    await until(() => agentMarks.includes("reply-2"), "the agent's own marks")
    expect(agentMarks.every((name) => name.startsWith("reply-"))).toBe(true)

    // The histogram counts the two confirmed answers.
    const metrics = await (await fetch(`${gateway.httpBase}/metrics`)).text()
    const count = metrics
      .split("\n")
      .find((line) => line.startsWith("callgate_agent_response_played_latency_seconds_count{") && line.includes(`agent="${agentId}"`))
    expect(Number(count?.split(" ").at(-1))).toBe(2)
  })
})
