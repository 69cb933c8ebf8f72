import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { uniqueId } from "../support/testApp.js"
import { agentMedia, audioFrames, dialInAgent, type Gateway, sessionIdOf, startGateway, storedSession, twilioCall, until } from "./callHarness.js"

const caller = audioFrames("caller-appointment.ulaw", 40)

/**
 * The session's own steps on the production wiring: the hard-error path into the error fallback
 * (while the carrier stream is still open), the turn observer on real audio, and the maximum duration.
 */
describe("session life cycle: hard errors, turn observation, maximum duration", () => {
  let gateway: Gateway

  beforeAll(async () => {
    gateway = await startGateway({ env: { SESSION_MAX_DURATION: "2s" } })
  })
  afterAll(() => gateway.close())

  const connectedCall = async () => {
    const agentId = uniqueId("agent")
    // No agent failover: a hard error runs the fallback at once (agentFailover.test.ts covers the failover).
    const env = await gateway.createEnvironment(agentId, { agentFailoverTimeout: 0 })
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, {
      token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid }),
      callSid
    })
    call.start()
    await agent.waitForEvent("start")
    return { agentId, env, agent, call, callSid, sessionId: sessionIdOf(agent) }
  }

  it("a hard error runs the error fallback once, while the carrier stream is still open; its outcome is recorded", async () => {
    const { agent, agentId, call, callSid, sessionId } = await connectedCall()
    // The carrier holds its answer: callgate must keep the stream open until the fallback's request is answered.
    gateway.twilio.failNext({ delayMs: 2000 })
    agent.send({ event: "error", error: { message: "model unavailable" } })
    await until(() => gateway.twilio.callUpdates(callSid).length === 1, "the fallback's carrier request", 30_000)
    expect(call.peer.closed).toBeUndefined()
    // Disabled fallback (the default): the call is hung up, exactly once.
    expect(gateway.twilio.callUpdates(callSid).map((r) => r.form)).toEqual([{ Status: "completed" }])
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_error" })
    await call.peer.waitClosed()
    expect(gateway.twilio.callUpdates(callSid)).toHaveLength(1)
    expect(await storedSession(gateway, agentId, sessionId)).toMatchObject({
      status: "failed",
      endReason: "agent_error",
      fallback: { trigger: "agent_error", type: "disabled", outcome: "hung_up", errorMessage: expect.stringContaining("model unavailable") }
    })
  })

  it("every caller frame reaches the agent unchanged while the production turn observer watches the call", async () => {
    const { agent, call, sessionId } = await connectedCall()
    for (const frame of caller) call.media(frame)
    call.dtmf("4")
    await agent.waitForEvent("dtmf")
    expect(agentMedia(agent)).toEqual(caller)
    call.stop()
    expect((await gateway.outbox.forSession(sessionId)).status).toBe("completed")
  })

  it("a session reaching SESSION_MAX_DURATION ends as timeout and the call is hung up", async () => {
    const { agent, call, callSid, sessionId } = await connectedCall()
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "timeout", endReason: "max_duration" })
    expect(Number(ended.duration)).toBeGreaterThanOrEqual(2)
    expect(gateway.twilio.callUpdates(callSid)[0]!.form).toEqual({ Status: "completed" })
    await agent.waitForEvent("stop")
    await call.peer.waitClosed()
  })
})
