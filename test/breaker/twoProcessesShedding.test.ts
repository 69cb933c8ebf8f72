import { afterEach, describe, expect, inject, it } from "vitest"
import { type AnsweringAgent, startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { readUlawFile, speechLike } from "../../sim/AudioSource.js"
import { onGatewayOrigin, twilioSid, twilioSignature } from "../../sim/CallEntry.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import type { SimCall } from "../../sim/SimCall.js"
import { parseStreamMarkup } from "../../sim/StreamMarkup.js"
import { connectTwilioStream, placeTwilioCall } from "../../sim/TwilioCall.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { ADMIN_KEY, adminAuth, TEST_SECRETS_KEY, uniqueId } from "../support/testApp.js"

/**
 * Shedding across the fleet (docs/fallback.md, "Shedding"): two callgate processes
 * (`node --import tsx src/main.ts`, as in production) on one real Redis, their carrier REST
 * pointed at one fake Twilio in this process. The breaker's window and its probe slot live in
 * Redis: calls that stall on A trip it, and B sheds new calls at its entry; of the new calls on
 * both, exactly one is the probe; its agent answers on the instance placement chose, and the
 * breaker is closed for both.
 */

const AGENT_NUMBER = "+15550100002"
const FALLBACK_NUMBER = "+14155550123"

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

const sentence = () => speechLike({ durationMs: 1600 })
const greeting = readUlawFile("examples/agents/audio/agent-greeting.ulaw")
const reply = greeting.subarray(5 * FRAME_BYTES, 45 * FRAME_BYTES)

interface Instance {
  readonly name: string
  readonly process: GatewayProcess
  readonly publicUrl: string
}

describe("shedding across two callgate processes on one Redis", () => {
  let twilio: FakeTwilio | undefined
  const instances: Array<Instance> = []
  const agents: Array<SilentAgent | AnsweringAgent> = []
  const calls: Array<SimCall> = []

  afterEach(async () => {
    await Promise.all(calls.splice(0).map((call) => call.hangup()))
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    await Promise.all(instances.splice(0).map((instance) => instance.process.stop("SIGTERM", 10_000)))
    await twilio?.close()
    twilio = undefined
  })

  const startInstance = async (name: string, fake: FakeTwilio): Promise<Instance> => {
    const publicUrl = `https://${name}.callgate.test`
    const process = await spawnGateway({
      ADMIN_API_KEY: ADMIN_KEY,
      REDIS_URL: inject("redisUrl"),
      SECRETS_KEY: TEST_SECRETS_KEY,
      PUBLIC_URL: publicUrl,
      ...fake.env,
      RATE_LIMIT_PER_MINUTE: "0",
      SHUTDOWN_DRAIN_TIMEOUT: "2s",
      TURN_END_SILENCE_MS: "200",
      BREAKER_PROBE_INTERVAL: "1h",
      LOG_LEVEL: "warn"
    })
    const instance = { name, process, publicUrl }
    instances.push(instance)
    // Starting a process under tsx is slow on a busy machine: a generous wait, not a measurement.
    await waitForHealthy(process, "/readyz", 150_000)
    return instance
  }

  it("a trip on A sheds on B; one probe across both; the probe answered closes it for both", async () => {
    twilio = await startFakeTwilio()
    const fake = twilio
    const [a, b] = await Promise.all([startInstance("a", fake), startInstance("b", fake)])

    const agentId = uniqueId("agent")
    const created = await fetch(`${a.process.baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({
        name: "shedding fleet",
        errorFallbackType: "phone",
        errorFallbackValue: FALLBACK_NUMBER,
        errorFallbackTimeout: 1,
        errorFallbackOccurrenceThreshold: 2,
        errorFallbackTimeWindow: 300
      })
    })
    expect(created.status).toBe(201)
    const environmentId: string = ((await created.json()) as any).data.id
    const path = `/telephony/twilio/voice?agentId=${encodeURIComponent(agentId)}&environmentId=${encodeURIComponent(environmentId)}`
    const connection = (instance: Instance) => ({ gatewayUrl: instance.process.baseUrl, agentId, environmentId, apiKey: ADMIN_KEY })

    const breaker = async (instance: Instance): Promise<any> => {
      const res = await fetch(`${instance.process.baseUrl}/v1/agents/${agentId}/environments/${environmentId}/breaker`, { headers: adminAuth })
      return ((await res.json()) as any).data
    }
    const metric = async (instance: Instance, name: string) => {
      const text = await (await fetch(`${instance.process.baseUrl}/metrics`)).text()
      const line = text.split("\n").find((l) => l.startsWith(`${name}{`) && l.includes(`environment="${environmentId}"`))
      return line === undefined ? undefined : Number(line.split(" ").at(-1))
    }
    const sessionOf = async (instance: Instance, callSid: string): Promise<any> => {
      const res = await fetch(`${instance.process.baseUrl}/v1/agents/${agentId}/sessions?environmentId=${environmentId}&limit=100`, { headers: adminAuth })
      return ((await res.json()) as any).data.sessions.find((s: any) => s.callId === callSid)
    }
    /** The voice webhook as Twilio posts it to `instance` (the number's webhook names that instance): the raw entry answer. */
    const entry = async (instance: Instance) => {
      const callSid = twilioSid("CA")
      const params = { CallSid: callSid, AccountSid: fake.accountSid, From: "+15550100001", To: AGENT_NUMBER, Direction: "inbound", CallStatus: "ringing" }
      const res = await fetch(`${instance.process.baseUrl}${path}`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": twilioSignature(fake.authToken, `${instance.publicUrl}${path}`, params) },
        body: new URLSearchParams(params).toString()
      })
      return { instance, callSid, status: res.status, body: await res.text() }
    }

    // A: two silent agents, two callers who speak at once; their deadlines pass together and the
    // second occurrence trips the breaker (one after another, the first call would be moved to the
    // second's idle agent after two missed deadlines: docs/reliability.md, "Agent failover").
    for (let i = 0; i < 2; i++) {
      const agent = await startSilentAgent(connection(a))
      agents.push(agent)
      await agent.ready()
    }
    const stalled: Array<string> = []
    const stalledCalls: Array<SimCall> = []
    for (let i = 0; i < 2; i++) {
      const callSid = twilioSid("CA")
      const call = await placeTwilioCall({
        ...connection(a),
        callSid,
        to: AGENT_NUMBER,
        streamVia: "gateway",
        authToken: fake.authToken,
        publicUrl: a.publicUrl
      })
      calls.push(call)
      stalledCalls.push(call)
      stalled.push(callSid)
    }
    await Promise.all(stalledCalls.map((call) => call.play(sentence())))
    // A safety net for events that must come (a busy machine is slow), not a claim about speed.
    await eventually(() => stalled.every((sid) => fake.callUpdates(sid).length > 0), (done) => done, "the two stalled calls on A rescued", 60_000)
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    // B never saw a call of the environment, and reads the breaker open from Redis.
    expect(await breaker(b)).toMatchObject({ state: "open", occurrences: 2, threshold: 2, shedNewCalls: true })

    // An answering agent on each instance; then three new calls on each, at once.
    for (const instance of [a, b]) {
      const answering = await startAnsweringAgent({ ...connection(instance), responseLatencyMs: 100, reply, capacity: 2 })
      agents.push(answering)
      await answering.ready()
    }
    const answers = await Promise.all([a, b, a, b, a, b].map(entry))
    expect(answers.every((x) => x.status === 200)).toBe(true)
    const isShed = (body: string) => body.includes("<Dial") && body.includes(FALLBACK_NUMBER) && !body.includes("<Stream")
    const probes = answers.filter((x) => x.body.includes("<Stream"))
    const shed = answers.filter((x) => isShed(x.body))
    expect(probes).toHaveLength(1)
    expect(shed).toHaveLength(5)
    // B shed calls for a trip that happened on A.
    const shedOnB = shed.filter((x) => x.instance === b)
    expect(shedOnB.length).toBeGreaterThanOrEqual(2)
    expect(await metric(b, "callgate_breaker_shed_calls_total")).toBe(shedOnB.length)
    for (const { callSid, instance } of shed) {
      expect(fake.callUpdates(callSid)).toEqual([])
      // Either instance shows the shed session (one store).
      const other = instance === a ? b : a
      const session = await eventually(() => sessionOf(other, callSid), (s) => s !== undefined, `the session of ${callSid}`, 60_000)
      expect(session).toMatchObject({ status: "failed", endReason: "breaker_open" })
    }
    expect((await breaker(a)).state).toBe("probing")
    expect((await breaker(b)).state).toBe("probing")

    // The probe's stream goes to the instance placement chose (the one holding an idle agent; the
    // entry's own first); the agent's voiced answer there closes the breaker for both.
    const probe = probes[0]!
    const stream = parseStreamMarkup(probe.body)
    const streamedTo = [a, b].find((instance) => stream.url.startsWith(instance.publicUrl.replace(/^https/, "wss")))
    expect(streamedTo).toBeDefined()
    const call = await connectTwilioStream({
      url: onGatewayOrigin(stream.url, streamedTo!.process.baseUrl),
      signedUrl: stream.url,
      authToken: fake.authToken,
      callSid: probe.callSid,
      customParameters: stream.parameters
    })
    calls.push(call)
    await call.play(sentence())
    const other = streamedTo === a ? b : a
    await eventually(() => breaker(other), (state) => state.state === "closed", "the breaker closed on the other instance", 60_000)
    expect(await breaker(streamedTo!)).toMatchObject({ state: "closed", occurrences: 0 })

    // The next call on the other instance reaches an agent.
    const next = await entry(other)
    expect(next.status).toBe(200)
    expect(next.body).toContain("<Stream")
  }, 300_000)
})
