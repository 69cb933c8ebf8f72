import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { type AnsweringAgent, startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { readUlawFile, speechLike } from "../../sim/AudioSource.js"
import { onGatewayOrigin, telnyxCallControlId } from "../../sim/CallEntry.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import type { SimCall } from "../../sim/SimCall.js"
import { parseStreamMarkup } from "../../sim/StreamMarkup.js"
import { connectTelnyxStream, placeTelnyxTexmlCall } from "../../sim/TelnyxCall.js"
import { BREAKER_OPEN_MESSAGE } from "../../src/telephony/entry/EntryFallback.js"
import { fallbackGatewayEnv } from "../fallback/liveCalls.js"
import { type Gateway, startGateway } from "../livecall/callHarness.js"
import { CA_FILE, type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { ADMIN_KEY, adminAuth, uniqueId } from "../support/testApp.js"

/**
 * An open breaker sheds new calls (docs/fallback.md, "Shedding") on Telnyx, both ways a Telnyx call
 * enters: a TeXML application (the fallback is the TeXML of the entry answer) and a Call Control
 * application (the fallback is the commands callgate sends for call.initiated: `transfer` to the
 * fallback number instead of `answer` with a stream). Production wiring, the fake Telnyx REST
 * server, the simulator as the caller, the example agents. Three stalled calls trip the breaker;
 * of the next ten calls one is the probe and goes to an agent, nine are shed and end failed /
 * breaker_open with their session.ended; the probe's agent answers, the breaker closes, and the
 * next call reaches an agent. The Twilio run is test/breaker/shedding.test.ts.
 */

const AGENT_NUMBER = "+15550100002"
const CALLER_NUMBER = "+15550100001"
const FALLBACK_NUMBER = "+14155550123"
const CONNECTION_ID = "1684641123236054244"

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

/** What the fallback webhook answers: a sentence, then the fallback number. */
const SORRY = "Sorry, our agents are busy. Connecting you to a person."
const WEBHOOK_TWIML = `<?xml version="1.0" encoding="UTF-8"?><Response><Say>${SORRY}</Say><Dial callerId="${AGENT_NUMBER}">${FALLBACK_NUMBER}</Dial></Response>`

/** A shed TeXML call's entry answer: the fallback's <Dial> to the fallback number, and no stream. */
const isDialAnswer = (body: string) => body.includes("<Dial") && body.includes(FALLBACK_NUMBER) && !body.includes("<Stream")

describe("an open breaker sheds new Telnyx calls at the entry", () => {
  let gateway: Gateway | undefined
  const agents: Array<SilentAgent | AnsweringAgent> = []
  const calls: Array<SimCall> = []
  let receiver: Receiver
  beforeAll(async () => {
    receiver = await startReceiver(() => ({ status: 200, headers: { "content-type": "text/xml" }, body: WEBHOOK_TWIML }))
  })
  afterAll(() => receiver.close())
  afterEach(async () => {
    await Promise.all(calls.splice(0).map((call) => call.hangup()))
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    await gateway?.close()
    gateway = undefined
  })

  const setup = async (fallback: "phone" | "webhook" = "phone") => {
    const g = (gateway = await startGateway({ env: { ...fallbackGatewayEnv(CA_FILE), BREAKER_PROBE_INTERVAL: "1h" } }))
    const agentId = uniqueId("agent")
    const { id: environmentId } = await g.createEnvironment(agentId, {
      errorFallbackType: fallback,
      errorFallbackValue: fallback === "phone" ? FALLBACK_NUMBER : receiver.url(`/fallback/${agentId}`),
      errorFallbackTimeout: 1,
      errorFallbackOccurrenceThreshold: 3,
      errorFallbackTimeWindow: 300
    })
    const connection = { gatewayUrl: g.httpBase, agentId, environmentId, apiKey: ADMIN_KEY }
    const query = `agentId=${encodeURIComponent(agentId)}&environmentId=${encodeURIComponent(environmentId)}`
    const breaker = async (): Promise<any> => {
      const res = await fetch(`${g.httpBase}/v1/agents/${agentId}/environments/${environmentId}/breaker`, { headers: adminAuth })
      return ((await res.json()) as any).data
    }
    const sessionOf = async (callId: string): Promise<any> => {
      const res = await fetch(`${g.httpBase}/v1/agents/${agentId}/sessions?environmentId=${environmentId}&limit=100`, { headers: adminAuth })
      const found = ((await res.json()) as any).data.sessions.find((s: any) => s.callId === callId)
      if (found === undefined) return undefined
      return ((await (await fetch(`${g.httpBase}/v1/agents/${agentId}/sessions/${found.id}`, { headers: adminAuth })).json()) as any).data
    }
    const metric = async (name: string) => {
      const text = await (await fetch(`${g.httpBase}/metrics`)).text()
      const line = text.split("\n").find((l) => l.startsWith(`${name}{`) && l.includes(`environment="${environmentId}"`))
      return line === undefined ? undefined : Number(line.split(" ").at(-1))
    }
    /** Three silent agents and three callers who speak on calls `place` opens; `rescued` tells each was rescued. */
    const trip = async (place: () => Promise<{ call: SimCall; callId: string }>, rescued: (callId: string) => boolean) => {
      // All three speak at once, so their deadlines pass together: one after another, a stalled call
      // would miss a second deadline while the next call's agent waits idle, and be moved to it
      // (docs/reliability.md, "Agent failover").
      for (let i = 0; i < 3; i++) {
        const agent = await startSilentAgent(connection)
        agents.push(agent)
        await agent.ready()
      }
      const placed: Array<{ call: SimCall; callId: string }> = []
      for (let i = 0; i < 3; i++) placed.push(await place())
      await Promise.all(placed.map(({ call }) => call.play(sentence())))
      const stalled = placed.map(({ callId }) => callId)
      await eventually(() => stalled.every(rescued), (done) => done, "the three stalled calls rescued")
      // The silent agents leave, so every later call is the answering agent's.
      await Promise.all(agents.splice(0).map((agent) => agent.close()))
      expect(await breaker()).toMatchObject({ state: "open", shedNewCalls: true, occurrences: 3, threshold: 3 })
    }
    const answeringAgent = async () => {
      const answering = await startAnsweringAgent({ ...connection, responseLatencyMs: 100, reply, capacity: 2 })
      agents.push(answering)
      await answering.ready()
    }
    /** A shed call's record and its one session.ended: failed / breaker_open, the fallback run at the entry. */
    const expectShedSession = async (callId: string) => {
      const session = await eventually(() => sessionOf(callId), (s) => s !== undefined, `the session of ${callId}`)
      expect(session).toMatchObject({
        status: "failed",
        endReason: "breaker_open",
        turns: [],
        fallback: { trigger: "breaker_open", type: fallback, outcome: fallback === "phone" ? "transferred" : "markup_applied" }
      })
      const event = await g.outbox.forSession(session.id)
      expect(event).toMatchObject({ event: "session.ended", status: "failed", endReason: "breaker_open", callId })
      expect(g.outbox.events.filter((e) => e.callId === callId)).toHaveLength(1)
    }
    /** The probe (or any admitted call) spoke to: its turn answered closes the breaker. */
    const expectProbeCloses = async (call: SimCall) => {
      calls.push(call)
      await call.play(sentence())
      await eventually(() => breaker(), (b) => b.state === "closed", "the breaker to close")
      expect((await breaker()).occurrences).toBe(0)
      expect(await metric("callgate_breaker_state")).toBe(0)
    }
    const expectAnswered = async (call: SimCall, callId: string) => {
      calls.push(call)
      await call.play(sentence())
      const session = await eventually(() => sessionOf(callId), (s) => s?.turns?.[0]?.latencyMs != null, "the next call's answered turn")
      expect(session.status).toBe("active")
    }
    return { g, agentId, environmentId, query, breaker, metric, trip, answeringAgent, expectShedSession, expectProbeCloses, expectAnswered }
  }

  /** A Call Control application's webhook as Telnyx posts it, and what callgate commanded in return. */
  const callControlOf = (t: Awaited<ReturnType<typeof setup>>) => {
    const { g } = t
    /** A Call Control webhook, signed as Telnyx signs it; Telnyx only needs the 200. */
    const post = async (eventType: string, payload: Record<string, unknown>) => {
      const body = g.telnyx.callControlEvent(eventType, payload)
      const res = await fetch(`${g.httpBase}/telephony/telnyx/call-control?${t.query}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...g.telnyx.signWebhook(body) },
        body
      })
      await res.text()
      return res.status
    }
    const initiated = (callId: string) =>
      post("call.initiated", { call_control_id: callId, connection_id: CONNECTION_ID, from: CALLER_NUMBER, to: AGENT_NUMBER, direction: "incoming" })
    /** What callgate commanded for a call.initiated: its `answer` (with the stream) and its `transfer`. */
    const commandsOf = (callId: string) => ({ answer: g.telnyx.commands(callId, "answer"), transfer: g.telnyx.commands(callId, "transfer") })
    const decided = (callId: string) => {
      const { answer, transfer } = commandsOf(callId)
      return answer.length + transfer.length > 0
    }
    /** Telnyx opening the stream the `answer` named. */
    const openStream = async (callId: string) => {
      const command = g.telnyx.commands(callId, "answer")[0]!.json as { stream_url: string; stream_auth_token: string; client_state: string }
      expect(command.stream_url).toContain("/telephony/telnyx/stream")
      return connectTelnyxStream({
        url: onGatewayOrigin(command.stream_url, g.httpBase),
        streamAuthToken: command.stream_auth_token,
        callControlId: callId,
        clientState: command.client_state
      })
    }
    const placeCall = async () => {
      const callId = telnyxCallControlId()
      expect(await initiated(callId)).toBe(200)
      await eventually(() => g.telnyx.commands(callId, "answer").length, (n) => n > 0, `the answer of ${callId}`)
      const call = await openStream(callId)
      return { call, callId }
    }
    return { post, initiated, commandsOf, decided, openStream, placeCall }
  }

  it("TeXML: 3 stalled sessions trip it; of 10 new calls 9 get the <Dial> as their entry answer and 1 is the probe; the probe answered closes it", { timeout: 120_000 }, async () => {
    const t = await setup()
    const { g } = t
    const placeCall = async () => {
      const callId = telnyxCallControlId()
      const call = await placeTelnyxTexmlCall({
        gatewayUrl: g.httpBase,
        agentId: t.agentId,
        environmentId: t.environmentId,
        callSid: callId,
        to: AGENT_NUMBER,
        streamVia: "gateway",
        webhookHeaders: g.telnyx.signWebhook
      })
      return { call, callId }
    }
    /** The TeXML application's voice URL as Telnyx posts it: the raw entry answer. */
    const entry = async (callId: string) => {
      const body = new URLSearchParams({
        CallSid: callId,
        AccountSid: "6a09cdc3-8948-47f0-aa62-74ac943d6c58",
        ConnectionId: CONNECTION_ID,
        From: CALLER_NUMBER,
        To: AGENT_NUMBER,
        Direction: "inbound",
        CallStatus: "ringing"
      }).toString()
      const res = await fetch(`${g.httpBase}/telephony/telnyx/texml?${t.query}`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", ...g.telnyx.signWebhook(body) },
        body
      })
      return { status: res.status, body: await res.text(), callId }
    }

    expect((await t.breaker()).state).toBe("closed")
    await t.trip(
      async () => {
        const placed = await placeCall()
        calls.push(placed.call)
        return placed
      },
      (callId) => g.telnyx.texmlUpdates(callId).length > 0
    )
    await t.answeringAgent()

    const answers = await Promise.all(Array.from({ length: 10 }, () => entry(telnyxCallControlId())))
    expect(answers.every((a) => a.status === 200)).toBe(true)
    const shed = answers.filter((a) => isDialAnswer(a.body))
    const probes = answers.filter((a) => a.body.includes("<Stream"))
    expect(shed).toHaveLength(9)
    expect(probes).toHaveLength(1)
    expect((await t.breaker()).state).toBe("probing")
    expect(await t.metric("callgate_breaker_state")).toBe(2)
    expect(await t.metric("callgate_breaker_shed_calls_total")).toBe(9)
    for (const { callId } of shed) {
      // The fallback was the entry answer: no TeXML call update for the call.
      expect(g.telnyx.texmlUpdates(callId)).toEqual([])
      await t.expectShedSession(callId)
    }

    // The probe goes to the answering agent; its timely voiced answer closes the breaker.
    const probe = probes[0]!
    const stream = parseStreamMarkup(probe.body)
    await t.expectProbeCloses(await connectTelnyxStream({ url: onGatewayOrigin(stream.url, g.httpBase), callControlId: probe.callId }))

    // The next call reaches an agent.
    const next = await placeCall()
    expect(next.call.entry?.stream.url).toContain("/telephony/telnyx/stream")
    await t.expectAnswered(next.call, next.callId)
  })

  it("Call Control: 3 stalled sessions trip it; of 10 new calls 9 get `transfer` for call.initiated and 1 is answered with the stream; the probe answered closes it", { timeout: 120_000 }, async () => {
    const t = await setup()
    const { g } = t
    const { initiated, commandsOf, decided, openStream, placeCall } = callControlOf(t)
    expect((await t.breaker()).state).toBe("closed")
    await t.trip(
      async () => {
        const placed = await placeCall()
        calls.push(placed.call)
        return placed
      },
      (callId) => g.telnyx.commands(callId, "transfer").length > 0
    )
    await t.answeringAgent()

    const callIds = Array.from({ length: 10 }, () => telnyxCallControlId())
    // Each webhook is acknowledged at once; the commands follow.
    expect(await Promise.all(callIds.map(initiated))).toEqual(Array(10).fill(200))
    await eventually(() => callIds.every(decided), (done) => done, "a command for every call.initiated")
    const shed = callIds.filter((id) => commandsOf(id).transfer.length > 0)
    const probes = callIds.filter((id) => commandsOf(id).answer.length > 0)
    expect(shed).toHaveLength(9)
    expect(probes).toHaveLength(1)
    expect((await t.breaker()).state).toBe("probing")
    expect(await t.metric("callgate_breaker_state")).toBe(2)
    expect(await t.metric("callgate_breaker_shed_calls_total")).toBe(9)
    for (const callId of shed) {
      // The fallback is what callgate sends for call.initiated: the transfer, never a stream.
      expect(g.telnyx.commands(callId).map((r) => r.path.split("/").at(-1))).toEqual(["transfer"])
      expect(commandsOf(callId).transfer[0]!.json).toMatchObject({ to: FALLBACK_NUMBER })
      await t.expectShedSession(callId)
    }

    // The probe is answered with the stream to the answering agent; its voiced answer closes the breaker.
    const probe = probes[0]!
    expect(commandsOf(probe).transfer).toEqual([])
    await t.expectProbeCloses(await openStream(probe))

    // The next call reaches an agent.
    const next = await placeCall()
    await t.expectAnswered(next.call, next.callId)
  })
  it("Call Control, webhook fallback: a shed call is answered without a stream, then the fallback's markup runs on it (speak, then transfer)", { timeout: 120_000 }, async () => {
    const t = await setup("webhook")
    const { g } = t
    const { post, initiated, commandsOf, placeCall } = callControlOf(t)
    const actions = (callId: string) => g.telnyx.commands(callId).map((r) => r.path.split("/").at(-1))
    await t.trip(
      async () => {
        const placed = await placeCall()
        calls.push(placed.call)
        return placed
      },
      (callId) => g.telnyx.commands(callId, "speak").length > 0
    )

    // The first new call is the probe (answered with the stream); the second is shed.
    const probe = telnyxCallControlId()
    expect(await initiated(probe)).toBe(200)
    await eventually(() => commandsOf(probe).answer.length, (n) => n > 0, "the probe's answer")
    expect((commandsOf(probe).answer[0]!.json as { stream_url?: string }).stream_url).toContain("/telephony/telnyx/stream")
    const shed = telnyxCallControlId()
    expect(await initiated(shed)).toBe(200)

    // Telnyx speaks only on an answered call: the shed call is answered (no stream) before the speech.
    await eventually(() => actions(shed), (a) => a.length >= 2, "the shed call's answer and speech")
    expect(actions(shed)).toEqual(["answer", "speak"])
    const answer = commandsOf(shed).answer[0]!.json as Record<string, unknown>
    expect(answer.stream_url).toBeUndefined()
    expect(answer.client_state).toEqual(expect.any(String))
    expect(g.telnyx.commands(shed, "speak")[0]!.json).toMatchObject({ payload: SORRY })
    // The fallback webhook was told why.
    const hooks = receiver.requests.filter((r) => r.path.startsWith(`/fallback/${t.agentId}?`) && r.body.toString().includes(shed))
    expect(hooks).toHaveLength(1)
    expect(JSON.parse(hooks[0]!.body.toString())).toMatchObject({ CallSid: shed, ErrorMessage: BREAKER_OPEN_MESSAGE })

    // Telnyx reports the speech done; the markup goes on to its <Dial>.
    expect(await post("call.speak.ended", { call_control_id: shed, connection_id: CONNECTION_ID })).toBe(200)
    await eventually(() => actions(shed), (a) => a.includes("transfer"), "the shed call's transfer")
    expect(actions(shed)).toEqual(["answer", "speak", "transfer"])
    expect(commandsOf(shed).transfer[0]!.json).toMatchObject({ to: FALLBACK_NUMBER })
    await t.expectShedSession(shed)
  })
})
