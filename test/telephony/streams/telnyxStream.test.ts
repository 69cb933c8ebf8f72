import { G722NarrowbandDecoder } from "../../../src/audio/G722.js"
import { type AudioFormat, bytesPerMs, G722_16K, linearToAlaw, linearToMulaw, MULAW_8K, mulawToLinear, payloadTranscoders } from "../../../src/kernel/AudioFormat.js"
import { callTraceIds } from "../../../src/observability/Tracing.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  agentMedia,
  audioFrames,
  dialInAgent,
  g722Stream,
  type Gateway,
  sessionIdOf,
  startGateway,
  storedSession,
  telnyxCall,
  until
} from "../../livecall/callHarness.js"
import { completeTransfer } from "../../fallback/liveCalls.js"
import { uniqueId } from "../../support/testApp.js"

const caller = audioFrames("caller-account.ulaw")
const agentVoice = audioFrames("agent-greeting.ulaw", 100)

/** Chunk numbers 1..n, shuffled inside blocks of `block` (never farther than the reorder window). */
const shuffledChunks = (n: number, block = 6) => {
  const order = Array.from({ length: n }, (_, i) => i + 1)
  let seed = 42
  for (let start = 0; start < n; start += block) {
    for (let i = Math.min(start + block, n) - 1; i > start; i--) {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      const j = start + (seed % (i - start + 1))
      ;[order[i], order[j]] = [order[j]!, order[i]!]
    }
  }
  return order
}

describe("Telnyx media streams end to end", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway()
  })
  afterAll(() => gateway.close())

  const callControlId = () => `v3:${uniqueId("cc")}`

  const connectedCall = async (kind: "telnyx-call-control" | "telnyx-texml" = "telnyx-call-control") => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
    const callId = kind === "telnyx-call-control" ? callControlId() : `v3:texml-${uniqueId("t")}`
    const token = gateway.issueToken({ agentId, environmentId: env.id, kind, callId, from: "+13122010094", to: "+13122123456" })
    const call = await telnyxCall(gateway, {
      token,
      callControlId: kind === "telnyx-call-control" ? callId : "v3:the-texml-call-control-id",
      headers: { authorization: `Bearer ${token}` }
    })
    call.start()
    await agent.waitForEvent("start")
    return { agentId, env, agent, call, callId, sessionId: sessionIdOf(agent) }
  }

  it("relays a whole call: shuffled chunks arrive ordered, agent audio, marks, clear, DTMF, stop", async () => {
    const { agentId, env, agent, call, callId, sessionId } = await connectedCall()
    const start = agent.events("start")[0]
    expect(start.start.customParameters).toEqual({
      sessionId,
      agentId,
      environmentId: env.id,
      from: "+13122010094",
      to: "+13122123456",
      from_number: "+13122010094",
      to_number: "+13122123456",
      direction: "inbound",
      provider: "telnyx",
      traceparent: `00-${callTraceIds(sessionId).traceId}-${callTraceIds(sessionId).spanId}-00`
    })
    // The agent sees Twilio's dialect whichever carrier it is.
    expect(start.start.mediaFormat).toEqual({ encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 })

    for (const chunk of shuffledChunks(caller.length)) call.media(caller[chunk - 1]!, chunk)
    await agent.waitForEvent("media", caller.length)
    expect(agentMedia(agent)).toEqual(caller)

    for (const frame of agentVoice) agent.send({ event: "media", streamSid: start.streamSid, media: { payload: frame } })
    agent.send({ event: "mark", streamSid: start.streamSid, mark: { name: "m1" } })
    await call.peer.waitFor((r) => r.some((m) => m.event === "mark" && m.mark.name === "m1"), "the agent's mark")
    expect(call.sentMedia()).toEqual(agentVoice)
    // Telnyx's own frame shapes, no Twilio fields. callgate's own playout mark (the agent's voice
    // answered the caller's turn) is there too; its echo never reaches the agent.
    expect(call.peer.received[0]).toEqual({ event: "media", media: { payload: agentVoice[0] } })
    const marks = call.peer.events("mark")
    expect(marks.filter((m) => !m.mark.name.startsWith("callgate:"))).toEqual([{ event: "mark", mark: { name: "m1" } }])
    for (const ours of marks.filter((m) => m.mark.name.startsWith("callgate:"))) call.mark(ours.mark.name)
    call.mark("m1")
    await agent.waitForEvent("mark")
    expect(agent.events("mark")[0].mark.name).toBe("m1")

    agent.send({ event: "mark", mark: { name: "m2" } })
    agent.send({ event: "clear" })
    await call.peer.waitForEvent("clear")
    expect(call.peer.events("clear")[0]).toEqual({ event: "clear" })
    call.mark("m2") // Telnyx returns queued marks on clear
    await agent.waitForEvent("mark", 2)

    call.dtmf("1")
    await agent.waitForEvent("dtmf")
    expect(agent.events("dtmf")[0].dtmf.digit).toBe("1")

    call.stop()
    await agent.waitForEvent("stop")
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({
      status: "completed",
      endReason: "caller_hangup",
      provider: "telnyx",
      callId,
      agentPhoneNumber: "+13122123456",
      clientPhoneNumber: "+13122010094",
      direction: "inbound"
    })
    expect((await storedSession(gateway, agentId, sessionId)).provider).toBe("telnyx")
  })

  it("accepts audio/x-mulaw as the encoding too, and a TeXML call", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
    const callId = `v3:texml-${uniqueId("t")}`
    const token = gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-texml", callId, accountSid: "texml-account-1" })
    const call = await telnyxCall(gateway, { token, callControlId: "v3:other-id-for-texml", encoding: "audio/x-mulaw" })
    call.start()
    call.media(caller[0]!)
    await agent.waitForEvent("media")
    // The session is the TeXML call's; from/to came from the start frame.
    expect(agent.events("start")[0].start.customParameters).toMatchObject({ from: "+13122010094", to: "+13122123456", provider: "telnyx" })
    agent.send({ event: "hangup" })
    const ended = await gateway.outbox.forSession(sessionIdOf(agent))
    expect(ended).toMatchObject({ status: "completed", endReason: "agent_hangup", callId })
    // A TeXML call is hung up with a TeXML call update.
    await until(() => gateway.telnyx.texmlUpdates(callId).length === 1, "TeXML hangup")
    const [update] = gateway.telnyx.texmlUpdates(callId)
    expect(update!.path).toBe(`/v2/texml/Accounts/texml-account-1/Calls/${callId}`)
    expect(update!.form).toEqual({ Status: "completed" })
  })

  it.each([
    ["PCMA", 8000, { encoding: "audio/x-alaw", sampleRate: 8000 }],
    ["L16", 8000, { encoding: "audio/L16", sampleRate: 8000 }],
    ["L16", 16000, { encoding: "audio/L16", sampleRate: 16000 }],
    // G.722 is 16 kHz audio on an 8000 Hz RTP clock: Telnyx may give either rate.
    ["G722", 8000, { encoding: "audio/G722", sampleRate: 16000 }],
    ["G722", 16000, { encoding: "audio/G722", sampleRate: 16000 }]
  ] as const)("a %s stream at %i Hz: start.mediaFormat says so, audio relayed byte for byte both ways, the caller's turn timed", async (encoding, sampleRate, mediaFormat) => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
    const callId = callControlId()
    const token = gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId })
    const call = await telnyxCall(gateway, { token, callControlId: callId, encoding, sampleRate })
    call.start()
    const [start] = await agent.waitForEvent("start")
    expect(start.start.mediaFormat).toEqual({ ...mediaFormat, channels: 1 })
    // The caller's recording in the stream's format: 20 ms frames of it.
    const format = { encoding: mediaFormat.encoding, sampleRate: mediaFormat.sampleRate } as AudioFormat
    const frameBytes = bytesPerMs(format) * 20
    const inFormat = (frames: ReadonlyArray<string>) =>
      format.encoding === "audio/G722" ? g722Stream(frames) : frames.map((frame) => {
        const mulaw = Buffer.from(frame, "base64")
        if (format.encoding === "audio/x-alaw") return Buffer.from(mulaw.map((byte) => linearToAlaw(mulawToLinear(byte)))).toString("base64")
        const out = Buffer.alloc(frameBytes)
        const repeat = format.sampleRate / 8000
        mulaw.forEach((byte, i) => {
          for (let r = 0; r < repeat; r++) out.writeInt16BE(mulawToLinear(byte), (i * repeat + r) * 2)
        })
        return out.toString("base64")
      })
    const spoken = inFormat([...caller.slice(0, 150), ...Array.from({ length: 60 }, () => Buffer.alloc(160, 0xff).toString("base64"))])
    for (const frame of spoken) call.media(frame)
    await agent.waitForEvent("media", spoken.length)
    expect(agentMedia(agent)).toEqual(spoken)
    const reply = inFormat(agentVoice.slice(0, 30))
    for (const frame of reply) agent.send({ event: "media", media: { payload: frame } })
    await until(() => call.sentMedia().length === reply.length, "the agent's audio at the carrier")
    expect(call.sentMedia()).toEqual(reply)
    const sessionId = sessionIdOf(agent)
    call.stop()
    await gateway.outbox.forSession(sessionId)
    // The VAD heard the caller's sentence in this format: one speech turn, answered.
    const turns = (await storedSession(gateway, agentId, sessionId)).turns
    expect(turns.map((t) => t.input)).toEqual(["speech"])
    expect(turns[0]!.latencyMs).toEqual(expect.any(Number))
  })

  it.each([
    ["PCMA", 8000],
    ["L16", 16000]
  ] as const)("agentAudioFormat audio/x-mulaw;rate=8000 on a %s %i Hz call: the agent hears and speaks 8 kHz mu-law, transcoded both ways", async (encoding, sampleRate) => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { agentAudioFormat: "audio/x-mulaw;rate=8000" })
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
    const callId = callControlId()
    const token = gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId })
    const call = await telnyxCall(gateway, { token, callControlId: callId, encoding, sampleRate })
    call.start()
    const [start] = await agent.waitForEvent("start")
    expect(start.start.mediaFormat).toEqual({ encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 })
    const repeat = sampleRate / 8000
    const toCarrier = (mulaw: Buffer) => {
      if (encoding === "PCMA") return Buffer.from(mulaw.map((byte) => linearToAlaw(mulawToLinear(byte))))
      const out = Buffer.alloc(mulaw.length * 2 * repeat)
      mulaw.forEach((byte, i) => {
        for (let r = 0; r < repeat; r++) out.writeInt16BE(mulawToLinear(byte), (i * repeat + r) * 2)
      })
      return out
    }
    // The caller in the carrier's format; the agent gets mu-law of the same samples.
    const sent = caller.slice(0, 20).map((frame) => toCarrier(Buffer.from(frame, "base64")))
    for (const frame of sent) call.media(frame.toString("base64"))
    await agent.waitForEvent("media", sent.length)
    const heard = agentMedia(agent).map((payload) => Buffer.from(payload, "base64"))
    expect(heard.map((frame) => frame.length)).toEqual(sent.map(() => 160))
    if (encoding === "L16") expect(heard).toEqual(caller.slice(0, 20).map((frame) => Buffer.from(frame, "base64")))
    else heard.forEach((frame, i) => expect(toCarrier(frame)).toEqual(sent[i]))
    // The agent's mu-law reaches the carrier in the carrier's format.
    const reply = agentVoice.slice(0, 10)
    for (const frame of reply) agent.send({ event: "media", media: { payload: frame } })
    await until(() => call.sentMedia().length === reply.length, "the agent's audio at the carrier")
    expect(call.sentMedia()).toEqual(reply.map((frame) => toCarrier(Buffer.from(frame, "base64")).toString("base64")))
    call.stop()
    await gateway.outbox.forSession(sessionIdOf(agent))
  })

  it("agentAudioFormat audio/x-mulaw;rate=8000 on a G722 call: the agent hears and speaks 8 kHz mu-law, through one decoder and one encoder for the call", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { agentAudioFormat: "audio/x-mulaw;rate=8000" })
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
    const callId = callControlId()
    const token = gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId })
    const call = await telnyxCall(gateway, { token, callControlId: callId, encoding: "G722", sampleRate: 8000 })
    call.start()
    const [start] = await agent.waitForEvent("start")
    expect(start.start.mediaFormat).toEqual({ encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 })
    // The caller's G.722, its low band (the audio at 8 kHz) decoded by one decoder over the whole stream, as mu-law.
    const sent = g722Stream(caller.slice(0, 40))
    for (const frame of sent) call.media(frame)
    await agent.waitForEvent("media", sent.length)
    const decoder = new G722NarrowbandDecoder()
    const pcm = new Int16Array(160)
    const expected = sent.map((frame) => {
      decoder.decode(Buffer.from(frame, "base64"), 160, pcm)
      return Buffer.from(Array.from(pcm, linearToMulaw)).toString("base64")
    })
    expect(agentMedia(agent)).toEqual(expected)
    // The agent's mu-law reaches the carrier as G.722 from one encoder kept for the call (what a
    // fresh transcoder gives for the same frames in order), and decodes back to the agent's voice.
    const reply = agentVoice.slice(0, 30)
    for (const frame of reply) agent.send({ event: "media", media: { payload: frame } })
    await until(() => call.sentMedia().length === reply.length, "the agent's audio at the carrier")
    const reference = payloadTranscoders(G722_16K, MULAW_8K)!
    expect(call.sentMedia()).toEqual(reply.map((frame) => reference.toCarrier(frame)))
    call.stop()
    await gateway.outbox.forSession(sessionIdOf(agent))
  })

  it("a stream in a format callgate does not relay (PCMU at 16 kHz) is refused with 1008", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const callId = callControlId()
    const token = gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId })
    const call = await telnyxCall(gateway, { token, callControlId: callId, sampleRate: 16000 })
    call.start()
    expect(await call.peer.waitClosed()).toMatchObject({ code: 1008, reason: expect.stringContaining("unsupported media format") })
  })

  it("a Call Control call.hangup (CallHungUp) ends the session as completed", async () => {
    const { agent, callId, sessionId } = await connectedCall()
    await gateway.hangUpCall(callId)
    await agent.waitForEvent("stop")
    expect(await gateway.outbox.forSession(sessionId)).toMatchObject({ status: "completed", endReason: "caller_hangup" })
  })

  it("the agent's hangup and transfer produce the Call Control commands", async () => {
    const hungUp = await connectedCall()
    hungUp.agent.send({ event: "hangup" })
    await gateway.outbox.forSession(hungUp.sessionId)
    expect(gateway.telnyx.commands(hungUp.callId, "hangup")).toHaveLength(1)

    const moved = await connectedCall()
    moved.agent.send({ event: "transfer", transfer: { to: "+13125550142" } })
    // session.ended waits for the transfer's outcome: the new leg's webhooks report it answered
    // (docs/fallback.md, "Transfer outcomes").
    await completeTransfer(gateway, { kind: "telnyx-call-control", callId: moved.callId }, moved.agentId)
    const ended = await gateway.outbox.forSession(moved.sessionId)
    expect(ended).toMatchObject({
      status: "completed",
      endReason: "agent_transfer",
      transfers: [{ to: "+13125550142", initiatedBy: "agent", status: "answered" }]
    })
    const [transfer] = gateway.telnyx.commands(moved.callId, "transfer")
    expect(transfer!.json).toMatchObject({ to: "+13125550142" })
  })

  it("a Telnyx error frame is a hard error: failed, and the call is hung up", async () => {
    const { call, callId, sessionId } = await connectedCall()
    call.peer.send({ event: "error", sequence_number: "9", stream_id: call.streamId, payload: { code: 100002, title: "unknown_error", detail: "An unknown error has occurred" } })
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "carrier_stream_error" })
    expect(gateway.telnyx.commands(callId, "hangup")).toHaveLength(1)
  })

  it("chunks out of order beyond repair close that stream (1002) and fail its session", async () => {
    const { agent, call, sessionId } = await connectedCall()
    call.media(caller[0]!, 1)
    call.media(caller[2]!, 3)
    call.media(caller[60]!, 61)
    const closed = await call.peer.waitClosed()
    expect(closed).toEqual({ code: 1002, reason: "telnyx: media chunks out of order beyond repair" })
    expect(await gateway.outbox.forSession(sessionId)).toMatchObject({ status: "failed", endReason: "carrier_protocol_error" })
    expect(agentMedia(agent)).toEqual([caller[0]])
  })

  it("a stop flushes chunks still waiting for a gap that never filled", async () => {
    const { agent, call } = await connectedCall()
    call.media(caller[0]!, 1)
    call.media(caller[2]!, 3)
    call.media(caller[3]!, 4)
    call.stop()
    await agent.waitForEvent("stop")
    expect(agentMedia(agent)).toEqual([caller[0], caller[2], caller[3]])
  })

  describe("refused streams (1008, before any agent hears them)", () => {
    const refused = async (reasonPart: string, connect: (token: string, callId: string) => Parameters<typeof telnyxCall>[1]) => {
      const agentId = uniqueId("agent")
      const env = await gateway.createEnvironment(agentId)
      const agent = await dialInAgent(gateway, agentId, env.id)
      await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
      const callId = callControlId()
      const token = gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId })
      const call = await telnyxCall(gateway, connect(token, callId))
      const closed = await call.peer.waitClosed()
      expect(closed.code).toBe(1008)
      expect(closed.reason).toContain(reasonPart)
      expect(gateway.idleAgents(agentId, env.id)).toBe(1)
      // The agent heard nothing and is still idle capacity: the environment's next, valid call
      // reaches that same socket, and its connected and start are the first frames the socket got.
      const validId = callControlId()
      const valid = await telnyxCall(gateway, {
        token: gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId: validId }),
        callControlId: validId
      })
      valid.start()
      await agent.waitForEvent("start")
      expect(agent.received.map((m) => m.event)).toEqual(["connected", "start"])
      expect(await storedSession(gateway, agentId, sessionIdOf(agent))).toMatchObject({ callId: validId })
      valid.stop()
      await agent.waitClosed()
    }

    it("no token on the URL", () => refused("missing token", (_token, callId) => ({ callControlId: callId })))

    it("a forged token", () =>
      refused("invalid or expired", (token, callId) => ({ token: `${token.split(".")[0]}.AAAA`, callControlId: callId })))

    it("a stream auth token header that differs from the URL token", () =>
      refused("stream auth token", (token, callId) => ({ token, callControlId: callId, headers: { authorization: "Bearer something-else" } })))

    it("an x-telnyx-streaming-auth-token header that differs", () =>
      refused("stream auth token", (token, callId) => ({
        token,
        callControlId: callId,
        headers: { "x-telnyx-streaming-auth-token": "nope" }
      })))

    it("a token issued for a Twilio stream", async () => {
      const agentId = uniqueId("agent")
      const env = await gateway.createEnvironment(agentId)
      const token = gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: "CA1" })
      const call = await telnyxCall(gateway, { token, callControlId: "v3:x" })
      expect((await call.peer.waitClosed()).code).toBe(1008)
    })

    it("a Call Control token presented by another call's stream", async () => {
      const agentId = uniqueId("agent")
      const env = await gateway.createEnvironment(agentId)
      const agent = await dialInAgent(gateway, agentId, env.id)
      await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
      const token = gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId: callControlId() })
      const call = await telnyxCall(gateway, { token, callControlId: callControlId() })
      call.start()
      const closed = await call.peer.waitClosed()
      expect(closed.code).toBe(1008)
      expect(closed.reason).toContain("another call")
      expect(agent.received).toEqual([])
      agent.close()
    })
  })
})
