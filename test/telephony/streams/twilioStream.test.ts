import { callTraceIds } from "../../../src/observability/Tracing.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  agentMedia,
  audioFrames,
  dialInAgent,
  type Gateway,
  sessionIdOf,
  startGateway,
  storedSession,
  twilioCall,
  until
} from "../../livecall/callHarness.js"
import { uniqueId } from "../../support/testApp.js"
import { reportTransferOutcome, trackedDial, transferRequestOf } from "../../fallback/liveCalls.js"

const caller = audioFrames("caller-appointment.ulaw")
const agentVoice = audioFrames("agent-greeting.ulaw")

describe("Twilio media streams end to end", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway()
  })
  afterAll(() => gateway.close())

  /** An environment with one idle dial-in agent, and a Twilio stream for a new call, started. */
  const connectedCall = async (options: { from?: string; to?: string } = {}) => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "the agent to be idle")
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const token = gateway.issueToken({
      agentId,
      environmentId: env.id,
      kind: "twilio",
      callId: callSid,
      from: options.from ?? "+14155550100",
      to: options.to ?? "+14155550111"
    })
    const call = await twilioCall(gateway, { token, callSid })
    call.start()
    await agent.waitForEvent("start")
    return { agentId, env, agent, call, callSid, sessionId: sessionIdOf(agent) }
  }

  it("relays a whole call: start parameters, audio both ways byte for byte, marks, clear, DTMF, stop", async () => {
    const { agentId, env, agent, call, callSid, sessionId } = await connectedCall()

    // connected, then start with every parameter (Twilio's shape).
    expect(agent.received[0]).toEqual({ event: "connected", protocol: "Call", version: "1.0.0" })
    const start = agent.received[1]
    expect(start.event).toBe("start")
    expect(start.start.mediaFormat).toEqual({ encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 })
    expect(start.start.customParameters).toEqual({
      sessionId,
      agentId,
      environmentId: env.id,
      from: "+14155550100",
      to: "+14155550111",
      from_number: "+14155550100",
      to_number: "+14155550111",
      direction: "inbound",
      provider: "twilio",
      traceparent: `00-${callTraceIds(sessionId).traceId}-${callTraceIds(sessionId).spanId}-00`
    })
    expect(start.start.customParameters).not.toHaveProperty("token")
    expect(start.streamSid).toBe(start.start.streamSid)

    // Caller audio: every frame, byte-identical, in order.
    for (const frame of caller) call.media(frame)
    await agent.waitForEvent("media", caller.length)
    expect(agentMedia(agent)).toEqual(caller)
    const media = agent.events("media")
    expect(media.map((m) => Number(m.media.chunk))).toEqual(caller.map((_, i) => i + 1))
    expect(media.every((m) => m.streamSid === start.streamSid && m.media.track === "inbound")).toBe(true)

    // Agent audio to the carrier, then a mark; Twilio plays it and echoes the mark.
    for (const frame of agentVoice) agent.send({ event: "media", streamSid: start.streamSid, media: { payload: frame } })
    agent.send({ event: "mark", streamSid: start.streamSid, mark: { name: "greeting-done" } })
    await call.peer.waitFor((r) => r.some((m) => m.event === "mark" && m.mark.name === "greeting-done"), "the agent's mark")
    expect(call.sentMedia()).toEqual(agentVoice)
    const toTwilio = call.peer.received
    expect(toTwilio.every((m) => m.streamSid === call.streamId)).toBe(true)
    expect(toTwilio[toTwilio.length - 1]).toEqual({ event: "mark", streamSid: call.streamId, mark: { name: "greeting-done" } })
    // callgate's own playout marks (when the agent's voice answered a caller turn) come back too; they stop at callgate.
    for (const ours of call.peer.events("mark").filter((m) => m.mark.name.startsWith("callgate:"))) call.mark(ours.mark.name)
    call.mark("greeting-done")
    await agent.waitForEvent("mark")
    expect(agent.events("mark")[0].mark).toEqual({ name: "greeting-done" })

    // clear goes to Twilio; Twilio answers by returning the outstanding marks, which reach the agent.
    agent.send({ event: "mark", mark: { name: "pending-1" } })
    agent.send({ event: "clear", streamSid: start.streamSid })
    await call.peer.waitForEvent("clear")
    call.mark("pending-1")
    await agent.waitForEvent("mark", 2)
    expect(agent.events("mark")[1].mark.name).toBe("pending-1")

    // DTMF reaches the agent.
    call.dtmf("7")
    call.dtmf("#")
    await agent.waitForEvent("dtmf", 2)
    expect(agent.events("dtmf").map((m) => m.dtmf.digit)).toEqual(["7", "#"])

    // The caller hangs up: the agent gets stop, its socket is closed; the session is completed.
    call.stop()
    await agent.waitForEvent("stop")
    expect((await agent.waitClosed()).code).toBe(1000)
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({
      event: "session.ended",
      sessionId,
      agentId,
      environmentId: env.id,
      status: "completed",
      endReason: "caller_hangup",
      direction: "inbound",
      provider: "twilio",
      callId: callSid,
      agentPhoneNumber: "+14155550111",
      clientPhoneNumber: "+14155550100"
    })
    expect(ended.duration).toMatch(/^\d+$/)
    expect(Date.parse(ended.createdAt)).not.toBeNaN()
    const record = await storedSession(gateway, agentId, sessionId)
    expect(record).toMatchObject({ status: "completed", endReason: "caller_hangup", callId: callSid, provider: "twilio" })
    expect(record.endedAt).not.toBeNull()
    // A stop needs no REST call.
    expect(gateway.twilio.callUpdates(callSid)).toEqual([])
  })

  it("the carrier socket closing without stop completes the session", async () => {
    const { agent, call, sessionId } = await connectedCall()
    call.peer.ws.close(1000)
    await agent.waitForEvent("stop")
    expect((await gateway.outbox.forSession(sessionId)).status).toBe("completed")
  })

  it("the agent's hangup ends the call through Twilio's REST API", async () => {
    const { agent, call, callSid, sessionId } = await connectedCall()
    agent.send({ event: "hangup" })
    await gateway.twilio.waitForRequests(1)
    const [update] = gateway.twilio.callUpdates(callSid)
    expect(update!.method).toBe("POST")
    expect(update!.path).toBe(`/2010-04-01/Accounts/${gateway.twilio.accountSid}/Calls/${callSid}.json`)
    expect(update!.form).toEqual({ Status: "completed" })
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "completed", endReason: "agent_hangup" })
    expect((await call.peer.waitClosed()).code).toBe(1000)
    gateway.twilio.reset()
  })

  it("the agent's transfer moves the call with <Dial> through Twilio's REST API", async () => {
    const { agentId, agent, callSid, sessionId } = await connectedCall({ to: "+14155550199" })
    agent.send({ event: "transfer", transfer: { to: "+14155550123" } })
    // Tracked (docs/fallback.md, "Transfer outcomes"): session.ended waits for the carrier's outcome.
    const call = { kind: "twilio" as const, callId: callSid }
    await transferRequestOf(gateway, call)
    const [update] = gateway.twilio.callUpdates(callSid)
    expect(update!.form?.Twiml).toBe(trackedDial("twilio", "+14155550123", "+14155550199", { agentId, sessionId }))
    await reportTransferOutcome(gateway, call, { agentId, sessionId }, "answered")
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "completed", endReason: "agent_transfer", transfers: [{ status: "answered", initiatedBy: "agent" }] })
    gateway.twilio.reset()
  })

  it("a transfer the carrier refuses is a hard error (transfer_failed): failed, and the call is hung up", async () => {
    const { agent, callSid, sessionId } = await connectedCall()
    gateway.twilio.failNext({ status: 400, code: 13214, message: "Dial: Invalid callerId value" })
    agent.send({ event: "transfer", transfer: { to: "+14155550123" } })
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "transfer_failed" })
    const updates = gateway.twilio.callUpdates(callSid)
    expect(updates.map((u) => Object.keys(u.form ?? {}))).toEqual([["Twiml"], ["Status"]])
    expect(updates[1]!.form).toEqual({ Status: "completed" })
    gateway.twilio.reset()
  })

  it("a transfer to something that is not E.164 is a protocol error: failed, and the call is hung up", async () => {
    const { agent, callSid, sessionId } = await connectedCall()
    agent.send({ event: "transfer", transfer: { to: "0800 FLOWERS" } })
    const closed = await agent.waitClosed()
    expect(closed.code).toBe(1007)
    expect(closed.reason).toContain("transfer.to")
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_protocol_error" })
    expect(gateway.twilio.callUpdates(callSid)[0]!.form).toEqual({ Status: "completed" })
    gateway.twilio.reset()
  })

  it("an agent error is a hard error: failed, the call hung up", async () => {
    const { agent, callSid, sessionId } = await connectedCall()
    agent.send({ event: "error", error: { message: "LLM quota exceeded" } })
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_error" })
    expect(gateway.twilio.callUpdates(callSid)[0]!.form).toEqual({ Status: "completed" })
    await agent.waitForEvent("stop")
    gateway.twilio.reset()
  })

  it("an agent socket dropping mid-call is a hard error", async () => {
    const { agent, call, callSid, sessionId } = await connectedCall()
    call.media(caller[0]!)
    await agent.waitForEvent("media")
    agent.close()
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_disconnected" })
    expect(gateway.twilio.callUpdates(callSid)).toHaveLength(1)
    expect((await call.peer.waitClosed()).code).toBe(1000)
    gateway.twilio.reset()
  })

  it("no idle agent is a hard error at once", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid }), callSid })
    call.start()
    await until(() => gateway.outbox.events.some((e) => e.callId === callSid), "session.ended")
    expect(gateway.outbox.events.find((e) => e.callId === callSid)).toMatchObject({ status: "failed", endReason: "no_idle_agent" })
    expect(gateway.twilio.callUpdates(callSid)[0]!.form).toEqual({ Status: "completed" })
    gateway.twilio.reset()
  })

  it("caller frames sent before the agent is connected are held and delivered in order", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid }), callSid })
    // Everything in one burst, right after start (as Twilio does).
    call.start()
    for (const frame of caller.slice(0, 50)) call.media(frame)
    call.dtmf("5")
    await agent.waitForEvent("dtmf")
    expect(agentMedia(agent)).toEqual(caller.slice(0, 50))
    call.stop()
    await agent.waitClosed()
  })

  describe("refused streams (closed with 1008 before any agent hears them)", () => {
    const refusedWith = async (reasonPart: string, build: (ids: { agentId: string; envId: string; callSid: string }) => Parameters<typeof twilioCall>[1]) => {
      const agentId = uniqueId("agent")
      const env = await gateway.createEnvironment(agentId)
      const agent = await dialInAgent(gateway, agentId, env.id)
      await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
      const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
      const call = await twilioCall(gateway, build({ agentId, envId: env.id, callSid }))
      call.start()
      call.media(caller[0]!)
      const closed = await call.peer.waitClosed()
      expect(closed.code).toBe(1008)
      expect(closed.reason).toContain(reasonPart)
      expect(gateway.idleAgents(agentId, env.id)).toBe(1)
      expect(gateway.liveCount()).toBe(0)
      // The agent heard nothing and is still idle capacity: the environment's next, valid call
      // reaches that same socket, and its connected and start are the first frames the socket got.
      const validSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
      const valid = await twilioCall(gateway, {
        token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: validSid }),
        callSid: validSid
      })
      valid.start()
      await agent.waitForEvent("start")
      expect(agent.received.map((m) => m.event)).toEqual(["connected", "start"])
      expect(await storedSession(gateway, agentId, sessionIdOf(agent))).toMatchObject({ callId: validSid })
      valid.stop()
      await agent.waitClosed()
    }

    it("no session token", () => refusedWith("missing session token", ({ callSid }) => ({ callSid })))

    it("a forged session token", () =>
      refusedWith("invalid or expired session token", ({ agentId, envId, callSid }) => {
        const token = gateway.issueToken({ agentId, environmentId: envId, kind: "twilio", callId: callSid })
        const [body] = token.split(".")
        return { callSid, token: `${body}.${Buffer.alloc(32, 1).toString("base64url")}` }
      }))

    it("a token issued for another call", () =>
      refusedWith("another call", ({ agentId, envId, callSid }) => ({
        callSid,
        token: gateway.issueToken({ agentId, environmentId: envId, kind: "twilio", callId: "CAsomeoneelse" })
      })))

    it("a token issued for a Telnyx stream", () =>
      refusedWith("not issued for a Twilio stream", ({ agentId, envId, callSid }) => ({
        callSid,
        token: gateway.issueToken({ agentId, environmentId: envId, kind: "telnyx-call-control", callId: callSid })
      })))

    it("a bad X-Twilio-Signature on the upgrade", () =>
      refusedWith("X-Twilio-Signature", ({ agentId, envId, callSid }) => ({
        callSid,
        token: gateway.issueToken({ agentId, environmentId: envId, kind: "twilio", callId: callSid }),
        signature: gateway.twilio.sign("wss://evil.example/telephony/twilio/stream")
      })))

    it("no X-Twilio-Signature on the upgrade", () =>
      refusedWith("X-Twilio-Signature", ({ agentId, envId, callSid }) => ({
        callSid,
        token: gateway.issueToken({ agentId, environmentId: envId, kind: "twilio", callId: callSid }),
        signature: null
      })))

    it("a second stream for a call that already has one", async () => {
      const { agentId, env, agent, callSid, call } = await connectedCall()
      const again = await twilioCall(gateway, {
        callSid,
        token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid })
      })
      again.start()
      const closed = await again.peer.waitClosed()
      expect(closed.code).toBe(1008)
      expect(closed.reason).toContain("already open")
      // The first call is untouched.
      call.media(caller[0]!)
      await agent.waitForEvent("media")
      call.stop()
      await agent.waitClosed()
    })
  })
})
