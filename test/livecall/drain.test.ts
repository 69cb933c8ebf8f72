import { describe, expect, it } from "vitest"
import { uniqueId } from "../support/testApp.js"
import {
  agentMedia,
  audioFrames,
  dialInAgent,
  type Gateway,
  refusedUpgrade,
  sessionIdOf,
  startGateway,
  twilioCall,
  until
} from "./callHarness.js"

const caller = audioFrames("caller-account.ulaw", 30)

const liveCall = async (gateway: Gateway) => {
  const agentId = uniqueId("agent")
  const env = await gateway.createEnvironment(agentId)
  const agent = await dialInAgent(gateway, agentId, env.id)
  const spare = await dialInAgent(gateway, agentId, env.id)
  await until(() => gateway.idleAgents(agentId, env.id) === 2, "idle agents")
  const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
  const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid }), callSid })
  call.start()
  await until(() => agent.events("start").length + spare.events("start").length === 1, "the call to reach an agent")
  const [serving, idle] = agent.events("start").length === 1 ? [agent, spare] : [spare, agent]
  return { agentId, env, agent: serving!, spare: idle!, call, callSid, sessionId: sessionIdOf(serving!) }
}

describe("graceful shutdown", () => {
  it("stops taking calls and agents, lets live calls finish, then closes", async () => {
    // A drain timeout far beyond the test's own: when close() resolves, it is because the live call
    // finished, never because the timeout cut it.
    const gateway = await startGateway({ env: { SHUTDOWN_DRAIN_TIMEOUT: "1h" } })
    const { agentId, env, agent, spare, call, sessionId } = await liveCall(gateway)
    const closing = gateway.close()
    let closed = false
    void closing.then(() => (closed = true))
    // Idle dial-in sockets are released at once so workers reconnect elsewhere.
    expect((await spare.waitClosed()).code).toBe(1001)
    // New calls and new agents are refused.
    const late = await twilioCall(gateway, { callSid: "CAlate", token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: "CAlate" }) })
    const refused = await late.peer.waitClosed()
    expect(refused.code).toBe(1013)
    expect(await refusedUpgrade(`${gateway.wsBase}/v1/agents/${agentId}/environments/${env.id}/connect`, { authorization: "Bearer test-admin-key-0123456789" })).toEqual({
      status: 503,
      code: "UNAVAILABLE"
    })
    // Readiness fails, and the carriers' voice webhooks are refused with 503 so they use the number's fallback URL.
    const ready = await fetch(`${gateway.httpBase}/readyz`)
    expect(ready.status).toBe(503)
    expect(await ready.json()).toMatchObject({ status: "draining" })
    const params = { CallSid: "CAlate2", AccountSid: gateway.twilio.accountSid, From: "+14155550100", To: "+14155550199", Direction: "inbound" }
    const voicePath = `/telephony/twilio/voice?agentId=${agentId}&environmentId=${env.id}`
    const voice = await fetch(`${gateway.httpBase}${voicePath}`, {
      method: "POST",
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        "x-twilio-signature": gateway.twilio.sign(`https://callgate.test${voicePath}`, params)
      },
      body: new URLSearchParams(params).toString()
    })
    expect(voice.status).toBe(503)
    expect(await voice.text()).not.toContain("<Stream")
    // The live call goes on.
    for (const frame of caller) call.media(frame)
    await agent.waitForEvent("media", caller.length)
    expect(agentMedia(agent)).toEqual(caller)
    // Everything above happened while close() was still waiting for the live call.
    expect(closed).toBe(false)
    call.stop()
    await closing
    expect(gateway.outbox.events.find((e) => e.sessionId === sessionId)).toMatchObject({ status: "completed", endReason: "caller_hangup" })
  })

  it("cuts live calls at SHUTDOWN_DRAIN_TIMEOUT: a shutdown hard error, the rescue runs", async () => {
    const gateway = await startGateway({ env: { SHUTDOWN_DRAIN_TIMEOUT: "300ms" } })
    const { agent, call, callSid, sessionId } = await liveCall(gateway)
    await gateway.close()
    expect(gateway.outbox.events.find((e) => e.sessionId === sessionId)).toMatchObject({ status: "failed", endReason: "shutdown" })
    expect(gateway.twilio.callUpdates(callSid)).toHaveLength(1)
    await agent.waitClosed()
    await call.peer.waitClosed()
    expect(agent.events("stop")).toHaveLength(1)
  })
})
