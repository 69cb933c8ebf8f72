import { afterEach, describe, expect, it } from "vitest"
import { type AnsweringAgent, startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { readUlawFile, speechLike } from "../../sim/AudioSource.js"
import { onGatewayOrigin, twilioSid, twilioSignature } from "../../sim/CallEntry.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import type { SimCall } from "../../sim/SimCall.js"
import { parseStreamMarkup } from "../../sim/StreamMarkup.js"
import { connectTwilioStream, placeTwilioCall } from "../../sim/TwilioCall.js"
import { type Gateway, startGateway } from "../livecall/callHarness.js"
import { ADMIN_KEY, adminAuth, uniqueId } from "../support/testApp.js"

/**
 * An open breaker sheds new calls (docs/fallback.md, "Shedding"), on the production wiring: callgate
 * as main.ts wires it, the fake Twilio REST server, the simulator as the caller, the example
 * agents. Three stalled calls trip the breaker; of the next ten calls, one is the probe (it goes
 * to an agent), nine get the error fallback's <Dial> in the entry answer itself and end
 * failed / breaker_open with their session.ended; the probe's agent answers and the breaker
 * closes, and the next call reaches an agent.
 */

const PUBLIC_URL = "https://callgate.test"
const AGENT_NUMBER = "+15550100002"
const FALLBACK_NUMBER = "+14155550123"
const DIAL = `<?xml version="1.0" encoding="UTF-8"?><Response><Dial callerId="${AGENT_NUMBER}">${FALLBACK_NUMBER}</Dial></Response>`

const sentence = () => speechLike({ durationMs: 1600 })
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const eventually = async <A>(read: () => Promise<A> | A, check: (value: A) => boolean, what: string, timeoutMs = 30_000): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (check(value)) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(value)})`)
    await sleep(20)
  }
}

const greeting = readUlawFile("examples/agents/audio/agent-greeting.ulaw")
const reply = greeting.subarray(5 * FRAME_BYTES, 45 * FRAME_BYTES)

describe("an open breaker sheds new calls at the entry", () => {
  let gateway: Gateway | undefined
  const agents: Array<SilentAgent | AnsweringAgent> = []
  const calls: Array<SimCall> = []
  afterEach(async () => {
    await Promise.all(calls.splice(0).map((call) => call.hangup()))
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    await gateway?.close()
    gateway = undefined
  })

  const setup = async (patch: Record<string, unknown>) => {
    const g = (gateway = await startGateway({ env: { TURN_END_SILENCE_MS: "200", BREAKER_PROBE_INTERVAL: "1h" } }))
    const agentId = uniqueId("agent")
    const { id: environmentId } = await g.createEnvironment(agentId, {
      errorFallbackType: "phone",
      errorFallbackValue: FALLBACK_NUMBER,
      errorFallbackTimeout: 1,
      errorFallbackOccurrenceThreshold: 3,
      errorFallbackTimeWindow: 300,
      ...patch
    })
    const connection = { gatewayUrl: g.httpBase, agentId, environmentId, apiKey: ADMIN_KEY }
    const placeCall = async () => {
      const callSid = twilioSid("CA")
      const call = await placeTwilioCall({
        gatewayUrl: g.httpBase,
        agentId,
        environmentId,
        callSid,
        to: AGENT_NUMBER,
        streamVia: "gateway",
        authToken: g.twilio.authToken,
        publicUrl: PUBLIC_URL
      })
      calls.push(call)
      return { call, callSid }
    }
    /** The voice webhook as Twilio posts it: the raw entry answer. */
    const entry = async (callSid: string) => {
      const path = `/telephony/twilio/voice?agentId=${encodeURIComponent(agentId)}&environmentId=${encodeURIComponent(environmentId)}`
      const params = { CallSid: callSid, AccountSid: g.twilio.accountSid, From: "+15550100001", To: AGENT_NUMBER, Direction: "inbound", CallStatus: "ringing" }
      const res = await fetch(`${g.httpBase}${path}`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": twilioSignature(g.twilio.authToken, `${PUBLIC_URL}${path}`, params) },
        body: new URLSearchParams(params).toString()
      })
      return { status: res.status, body: await res.text(), callSid }
    }
    const breaker = async (): Promise<any> => {
      const res = await fetch(`${g.httpBase}/v1/agents/${agentId}/environments/${environmentId}/breaker`, { headers: adminAuth })
      return ((await res.json()) as any).data
    }
    const sessionOf = async (callSid: string): Promise<any> => {
      const res = await fetch(`${g.httpBase}/v1/agents/${agentId}/sessions?environmentId=${environmentId}&limit=100`, { headers: adminAuth })
      const found = ((await res.json()) as any).data.sessions.find((s: any) => s.callId === callSid)
      if (found === undefined) return undefined
      return ((await (await fetch(`${g.httpBase}/v1/agents/${agentId}/sessions/${found.id}`, { headers: adminAuth })).json()) as any).data
    }
    /**
     * Three silent agents, three callers who speak at once: their deadlines pass together, the third
     * occurrence trips the breaker and all three are rescued. (One after another, a stalled call
     * would miss a second deadline while the next call's agent waits idle, and be moved to it:
     * docs/reliability.md, "Agent failover".)
     */
    const trip = async () => {
      for (let i = 0; i < 3; i++) {
        const agent = await startSilentAgent(connection)
        agents.push(agent)
        await agent.ready()
      }
      const stalled: Array<{ call: SimCall; callSid: string }> = []
      for (let i = 0; i < 3; i++) stalled.push(await placeCall())
      await Promise.all(stalled.map(({ call }) => call.play(sentence())))
      await eventually(() => stalled.every(({ callSid }) => g.twilio.callUpdates(callSid).length > 0), (done) => done, "the three stalled calls rescued")
      // The silent agents leave, so every later call is the answering agent's.
      await Promise.all(agents.splice(0).map((agent) => agent.close()))
    }
    const metric = async (name: string) => {
      const text = await (await fetch(`${g.httpBase}/metrics`)).text()
      const line = text.split("\n").find((l) => l.startsWith(`${name}{`) && l.includes(`environment="${environmentId}"`))
      return line === undefined ? undefined : Number(line.split(" ").at(-1))
    }
    return { g, agentId, environmentId, connection, placeCall, entry, breaker, sessionOf, trip, metric }
  }

  it("3 stalled sessions trip it; of 10 new calls 9 are shed at the entry and 1 is the probe; the probe answered closes it", { timeout: 120_000 }, async () => {
    const t = await setup({})
    expect((await t.breaker()).state).toBe("closed")
    await t.trip()
    expect(await t.breaker()).toMatchObject({ state: "open", shedNewCalls: true, occurrences: 3, threshold: 3 })

    const answering = await startAnsweringAgent({ ...t.connection, responseLatencyMs: 100, reply, capacity: 2 })
    agents.push(answering)
    await answering.ready()

    const answers = await Promise.all(Array.from({ length: 10 }, () => t.entry(twilioSid("CA"))))
    const shed = answers.filter((a) => a.body === DIAL)
    const probes = answers.filter((a) => a.body.includes("<Stream"))
    expect(answers.every((a) => a.status === 200)).toBe(true)
    expect(shed).toHaveLength(9)
    expect(probes).toHaveLength(1)
    expect((await t.breaker()).state).toBe("probing")
    expect(await t.metric("callgate_breaker_state")).toBe(2)
    expect(await t.metric("callgate_breaker_shed_calls_total")).toBe(9)

    for (const { callSid } of shed) {
      // The fallback was the entry answer: no REST request for the call.
      expect(t.g.twilio.callUpdates(callSid)).toEqual([])
      const session = await eventually(() => t.sessionOf(callSid), (s) => s !== undefined, `the session of ${callSid}`)
      expect(session).toMatchObject({
        status: "failed",
        endReason: "breaker_open",
        turns: [],
        fallback: { trigger: "breaker_open", type: "phone", outcome: "transferred" }
      })
      const event = await t.g.outbox.forSession(session.id)
      expect(event).toMatchObject({ event: "session.ended", status: "failed", endReason: "breaker_open", callId: callSid })
      expect(t.g.outbox.events.filter((e) => e.callId === callSid)).toHaveLength(1)
    }

    // The probe goes to the answering agent; its timely voiced answer closes the breaker.
    const probe = probes[0]!
    const stream = parseStreamMarkup(probe.body)
    const call = await connectTwilioStream({
      url: onGatewayOrigin(stream.url, t.g.httpBase),
      signedUrl: stream.url,
      authToken: t.g.twilio.authToken,
      callSid: probe.callSid,
      customParameters: stream.parameters
    })
    calls.push(call)
    await call.play(sentence())
    await eventually(() => t.breaker(), (b) => b.state === "closed", "the breaker to close")
    expect((await t.breaker()).occurrences).toBe(0)
    expect(await t.metric("callgate_breaker_state")).toBe(0)

    // The next call reaches an agent.
    const next = await t.placeCall()
    expect(next.call.entry?.stream.url).toContain("/telephony/twilio/stream")
    await next.call.play(sentence())
    const session = await eventually(() => t.sessionOf(next.callSid), (s) => s?.turns?.[0]?.latencyMs != null, "the next call's answered turn")
    expect(session.status).toBe("active")
  })

  it("errorFallbackShedNewCalls false: an open breaker sends every new call to an agent as before", { timeout: 120_000 }, async () => {
    const t = await setup({ errorFallbackShedNewCalls: false })
    await t.trip()
    expect(await t.breaker()).toMatchObject({ state: "open", shedNewCalls: false })
    const answers = await Promise.all(Array.from({ length: 3 }, () => t.entry(twilioSid("CA"))))
    expect(answers.every((a) => a.status === 200 && a.body.includes("<Stream"))).toBe(true)
    expect((await t.breaker()).state).toBe("open")
  })
})
