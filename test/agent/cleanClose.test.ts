import type { Socket } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Gateway, startGateway } from "../livecall/callHarness.js"
import { CA_FILE } from "../webhooks/httpsReceiver.js"
import {
  AGENT_NUMBER,
  CALL_KINDS,
  CALLER_SPEECH,
  carrierRequestsFor,
  completeTransfer,
  createEnvironment,
  endedEventsFor,
  expectCarrierRequest,
  FALLBACK_NUMBER,
  fallbackGatewayEnv,
  getSession,
  placeCall,
  waitForEnded
} from "../fallback/liveCalls.js"

/**
 * How an agent's socket closing mid-call is read (docs/calls.md, "A clean close is an ending"):
 * a close handshake with 1000 ends the session `completed` / `agent_closed` and hangs the call
 * up; any other close is a hard error and the fallback (here: a phone transfer) runs. Real
 * sockets: the agent is a `ws` client of callgate, the carrier REST the fake Twilio and Telnyx.
 */
describe.each(CALL_KINDS)("an agent closing its socket mid-call: %s", (kind) => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: fallbackGatewayEnv(CA_FILE) })
  })
  afterAll(() => gateway.close())

  const midCall = async () => {
    const env = await createEnvironment(gateway, { errorFallbackType: "phone", errorFallbackValue: FALLBACK_NUMBER })
    const call = await placeCall(gateway, env, kind)
    call.carrier.media(CALLER_SPEECH[0]!)
    await call.agent!.waitForEvent("media")
    return { env, call, agent: call.agent! }
  }

  it("1000 (normal): completed, agent_closed, the call hung up, no fallback", async () => {
    const { env, call, agent } = await midCall()
    agent.ws.close(1000, "bye")
    const ended = await waitForEnded(gateway, call.callId)
    expect(ended).toMatchObject({ status: "completed", endReason: "agent_closed", callId: call.callId })
    const session = await getSession(gateway, env.agentId, ended.sessionId)
    expect(session).toMatchObject({ status: "completed", endReason: "agent_closed", fallback: null })
    const requests = carrierRequestsFor(gateway, call.callId)
    expect(requests).toHaveLength(1)
    expectCarrierRequest(gateway, call, requests[0]!, { hangup: true })
    expect((await call.carrier.peer.waitClosed()).code).toBe(1000)
    expect(endedEventsFor(gateway, call.callId)).toHaveLength(1)
  })

  it("1006 (the socket destroyed, no close handshake): a hard error, the fallback transfers", async () => {
    const { env, call, agent } = await midCall()
    ;(agent.ws as unknown as { _socket: Socket })._socket.destroy()
    // The phone fallback's session.ended waits for the transfer's outcome: the number answers.
    await completeTransfer(gateway, call, env.agentId)
    const ended = await waitForEnded(gateway, call.callId)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_disconnected" })
    const session = await getSession(gateway, env.agentId, ended.sessionId)
    expect(session.fallback).toMatchObject({ trigger: "agent_disconnected", type: "phone", outcome: "transferred" })
    const requests = carrierRequestsFor(gateway, call.callId)
    expect(requests[0]).toBeDefined()
    expectCarrierRequest(gateway, call, requests[0]!, { dial: FALLBACK_NUMBER, callerId: AGENT_NUMBER, tracked: { agentId: env.agentId, sessionId: ended.sessionId } })
  })

  it("1011 (internal error): a hard error, the fallback transfers", async () => {
    const { env, call, agent } = await midCall()
    agent.ws.close(1011, "the bot crashed")
    // The phone fallback's session.ended waits for the transfer's outcome: the number answers.
    await completeTransfer(gateway, call, env.agentId)
    const ended = await waitForEnded(gateway, call.callId)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_disconnected" })
    const session = await getSession(gateway, env.agentId, ended.sessionId)
    expect(session.fallback).toMatchObject({
      trigger: "agent_disconnected",
      type: "phone",
      outcome: "transferred",
      errorMessage: "The agent closed its connection during the call (code 1011)"
    })
    const requests = carrierRequestsFor(gateway, call.callId)
    expect(requests[0]).toBeDefined()
    expectCarrierRequest(gateway, call, requests[0]!, { dial: FALLBACK_NUMBER, callerId: AGENT_NUMBER, tracked: { agentId: env.agentId, sessionId: ended.sessionId } })
  })

  it("1001 (going away): a hard error, the fallback transfers", async () => {
    const { env, call, agent } = await midCall()
    agent.ws.close(1001)
    // The phone fallback's session.ended waits for the transfer's outcome: the number answers.
    await completeTransfer(gateway, call, env.agentId)
    const ended = await waitForEnded(gateway, call.callId)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_disconnected" })
    expectCarrierRequest(gateway, call, carrierRequestsFor(gateway, call.callId)[0]!, {
      dial: FALLBACK_NUMBER,
      callerId: AGENT_NUMBER,
      tracked: { agentId: env.agentId, sessionId: ended.sessionId }
    })
  })
})
