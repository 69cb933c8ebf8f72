import { afterEach, describe, expect, it } from "vitest"
import { type AnsweringAgent, startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { readUlawFile, silence } from "../../sim/AudioSource.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import type { SimCall } from "../../sim/SimCall.js"
import { connectTelnyxStream, placeTelnyxTexmlCall } from "../../sim/TelnyxCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type Gateway, startGateway, until } from "../livecall/callHarness.js"
import { ADMIN_KEY, uniqueId } from "../support/testApp.js"

// The caller's first sentence (2.2 s) of the appointment recording.
const callerTurn = readUlawFile("test/fixtures/audio/caller-appointment.ulaw").subarray(0, 110 * FRAME_BYTES)
const reply = readUlawFile("examples/agents/audio/agent-greeting.ulaw").subarray(0, 40 * FRAME_BYTES)

/**
 * The simulator and the example answering agent against the real callgate (listening on
 * 127.0.0.1, fake carrier REST APIs): the same pieces the demo and the benchmark put together.
 * Each call's agent audio must arrive byte for byte and the simulator must see no frame a real
 * carrier would reject.
 */
describe("callgate-sim and the answering agent through the real gateway", () => {
  let gateway: Gateway | undefined
  let agent: AnsweringAgent | undefined
  const calls: Array<SimCall> = []
  afterEach(async () => {
    await Promise.all(calls.splice(0).map((call) => call.hangup()))
    await agent?.close()
    await gateway?.close()
    agent = gateway = undefined
  })

  const setup = async (settings: Parameters<Gateway["createEnvironment"]>[1] = {}) => {
    gateway = await startGateway()
    const agentId = uniqueId("agent")
    const environment = await gateway.createEnvironment(agentId, settings)
    agent = await startAnsweringAgent({
      gatewayUrl: gateway.httpBase,
      agentId,
      environmentId: environment.id,
      apiKey: ADMIN_KEY,
      reply,
      responseLatencyMs: 50
    })
    await agent.ready()
    return { agentId, environmentId: environment.id }
  }

  it.each(["twilio", "telnyx"] as const)("a %s caller speaks two turns and hears the agent answer both", async (provider) => {
    const { agentId, environmentId } = await setup()
    const options = { gatewayUrl: gateway!.httpBase, agentId, environmentId, from: "+15551110001", to: "+15551110002" } as const
    // callgate's PUBLIC_URL is https://callgate.test: reach its stream URL on the listening port.
    // callgate checks the carriers' signatures (the fake accounts' credentials are configured).
    const call =
      provider === "twilio"
        ? await placeTwilioCall({ ...options, streamVia: "gateway", authToken: gateway!.twilio.authToken, publicUrl: "https://callgate.test" })
        : await placeTelnyxTexmlCall({ ...options, streamVia: "gateway", webhookHeaders: gateway!.telnyx.signWebhook })
    calls.push(call)
    const started = new Promise<Record<string, string>>((resolve) => agent!.once("call", (start) => resolve({ ...start.customParameters })))
    const heard: Array<Buffer> = []
    call.on("agentMedia", ({ payload }) => heard.push(payload))
    // The agent's marks; callgate's own playout marks (docs/observability.md) come back too.
    const echoed: Array<string> = []
    call.on("markEchoed", ({ name }) => echoed.push(name))
    for (const turn of [1, 2]) {
      const result = await call.turn(Buffer.concat([callerTurn, silence(200)]), { answerTimeoutMs: 60_000 })
      expect(result.answer.answered, `turn ${turn} answered`).toBe(true)
      if (result.answer.answered) expect(result.answer.latencyMs).toBeGreaterThan(0)
      // The turn returns once the agent's audio pauses; on a busy machine a pause can come mid-reply,
      // so the whole reply is waited for (it must come, byte for byte: checked below).
      expect(result.agentBytes).toBeGreaterThan(0)
      await until(() => heard.reduce((total, chunk) => total + chunk.length, 0) === reply.length * turn, `turn ${turn}'s whole reply`)
    }
    await until(() => echoed.filter((name) => !name.startsWith("callgate:")).length === 2, "both reply marks echoed")
    expect(echoed.filter((name) => name.startsWith("callgate:")).sort()).toEqual(["callgate:played:1", "callgate:played:2"])
    // The agent's audio reached the caller byte for byte, in order.
    expect(Buffer.concat(heard).equals(Buffer.concat([reply, reply]))).toBe(true)
    expect(await started).toMatchObject({ agentId, environmentId, from: "+15551110001", to: "+15551110002", direction: "inbound", provider })
    expect(call.stats.protocolErrors).toBe(0)
    expect(await call.hangup()).toMatchObject({ by: "simulator", code: 1000 })
    await until(() => agent!.stats.callsEnded === 1, "the agent's call ended")
    expect(agent!.stats).toMatchObject({ calls: 1, turns: 2, replies: 2 })
    await until(() => gateway!.outbox.events.length === 1, "session.ended")
    expect(gateway!.outbox.events[0]).toMatchObject({ event: "session.ended", agentId, environmentId, status: "completed", provider })
  })

  it.each(["twilio", "telnyx"] as const)("%s: the entry URL's custom parameters and from_number / to_number reach the agent; callgate's own win", async (provider) => {
    const { agentId, environmentId } = await setup()
    const options = {
      gatewayUrl: gateway!.httpBase,
      agentId,
      environmentId,
      from: "+15551110001",
      to: "+15551110002",
      entryParameters: { lang: "es", "crm.case": "A-42", from: "+19999999999", provider: "other" }
    } as const
    const started = new Promise<Record<string, string>>((resolve) => agent!.once("call", (start) => resolve({ ...start.customParameters })))
    const call =
      provider === "twilio"
        ? await placeTwilioCall({ ...options, streamVia: "gateway", authToken: gateway!.twilio.authToken, publicUrl: "https://callgate.test" })
        : await placeTelnyxTexmlCall({ ...options, streamVia: "gateway", webhookHeaders: gateway!.telnyx.signWebhook })
    calls.push(call)
    expect(await started).toMatchObject({
      lang: "es",
      "crm.case": "A-42",
      from: "+15551110001",
      to: "+15551110002",
      from_number: "+15551110001",
      to_number: "+15551110002",
      provider,
      agentId,
      environmentId
    })
  })

  it.each(["PCMA", "L16;rate=8000", "L16;rate=16000", "G722"] as const)(
    "telnyxStreamCodec %s: the TeXML answer asks Telnyx for it, the simulated Telnyx streams in it, and the mu-law agent (agentAudioFormat) hears and answers each turn",
    async (codec) => {
      const { agentId, environmentId } = await setup({ telnyxStreamCodec: codec, agentAudioFormat: "audio/x-mulaw;rate=8000" })
      const call = await placeTelnyxTexmlCall({ gatewayUrl: gateway!.httpBase, agentId, environmentId, streamVia: "gateway", webhookHeaders: gateway!.telnyx.signWebhook })
      calls.push(call)
      // The simulator streams what the <Stream> asked for, as Telnyx does.
      expect(call.codec).toBe(codec)
      const heard: Array<Buffer> = []
      call.on("agentMedia", ({ payload }) => heard.push(payload))
      for (const turn of [1, 2]) {
        const result = await call.turn(Buffer.concat([callerTurn, silence(200)]), { answerTimeoutMs: 60_000 })
        expect(result.answer.answered, `turn ${turn} answered`).toBe(true)
        await until(() => heard.reduce((total, chunk) => total + chunk.length, 0) === reply.length * turn, `turn ${turn}'s whole reply`)
      }
      // L16 carries mu-law's samples exactly (at 16 kHz each is held for two); A-law is a second G.711 step, G.722 a lossy coder.
      if (codec.startsWith("L16")) expect(Buffer.concat(heard).equals(Buffer.concat([reply, reply]))).toBe(true)
      expect(call.stats.protocolErrors).toBe(0)
      await call.hangup()
      await until(() => gateway!.outbox.events.length === 1, "session.ended")
      expect(gateway!.outbox.events[0]).toMatchObject({ status: "completed", provider: "telnyx" })
      expect(agent!.stats).toMatchObject({ calls: 1, turns: 2, replies: 2 })
    }
  )

  it("a Telnyx Call Control stream, opened straight to the stream URL with its auth token", async () => {
    const { agentId, environmentId } = await setup()
    const callControlId = `v3:${uniqueId("cc")}`
    // What callgate's answer command names: the stream URL with the token, and the same token as stream_auth_token.
    const token = gateway!.issueToken({ agentId, environmentId, kind: "telnyx-call-control", callId: callControlId })
    const call = await connectTelnyxStream({
      url: `${gateway!.wsBase}/telephony/telnyx/stream?token=${encodeURIComponent(token)}`,
      streamAuthToken: token,
      callControlId
    })
    calls.push(call)
    const result = await call.turn(Buffer.concat([callerTurn, silence(200)]), { answerTimeoutMs: 60_000 })
    expect(result.answer.answered).toBe(true)
    expect(result.agentBytes).toBe(reply.length)
    expect(call.stats.protocolErrors).toBe(0)
    await call.hangup()
    await until(() => gateway!.outbox.events.length === 1, "session.ended")
    expect(gateway!.outbox.events[0]).toMatchObject({ status: "completed", provider: "telnyx", callId: callControlId })
  })
})
