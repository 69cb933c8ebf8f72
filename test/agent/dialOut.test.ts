import { createServer, type Socket } from "node:net"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  agentMedia,
  type AgentServer,
  audioFrames,
  type Gateway,
  startAgentServer,
  startGateway,
  telnyxCall,
  twilioCall,
  until
} from "../livecall/callHarness.js"
import { freePort } from "../support/redisServer.js"
import { uniqueId } from "../support/testApp.js"

const caller = audioFrames("caller-appointment-noisy.ulaw", 60)
const agentVoice = audioFrames("agent-greeting.ulaw", 60)

/** A TCP server that accepts connections and never answers the WebSocket handshake. */
const startSilentServer = async () => {
  const sockets: Array<{ socket: Socket; closed: boolean }> = []
  const server = createServer((socket) => {
    const entry = { socket, closed: false }
    sockets.push(entry)
    socket.resume()
    socket.on("close", () => (entry.closed = true))
    socket.on("error", () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `ws://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    sockets,
    close: async () => {
      for (const { socket } of sockets) socket.destroy()
      await new Promise((resolve) => server.close(resolve))
    }
  }
}

describe("dial-out agents (environment agentUrl)", () => {
  let gateway: Gateway
  let agents: AgentServer
  beforeAll(async () => {
    gateway = await startGateway({ env: { AGENT_CONNECT_TIMEOUT: "500ms", AGENT_ALLOW_PRIVATE_NETWORKS: "true" } })
    agents = await startAgentServer()
  })
  afterAll(async () => {
    await agents.close()
    await gateway.close()
  })

  const callSid = () => `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`

  it("connects to agentUrl for each call and relays it both ways", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { agentUrl: agents.url })
    const before = agents.peers.length
    const sids = [callSid(), callSid()]
    const calls = await Promise.all(
      sids.map((sid) => twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: sid }), callSid: sid }))
    )
    for (const call of calls) call.start()
    await until(() => agents.peers.length === before + 2, "one agent connection per call")
    const peers = agents.peers.slice(before)
    await Promise.all(peers.map((peer) => peer.waitForEvent("start")))
    for (const peer of peers) expect(peer.received[0]).toEqual({ event: "connected", protocol: "Call", version: "1.0.0" })

    // Pair each call with its agent connection by the session's call id.
    for (const call of calls) for (const frame of caller) call.media(frame)
    await Promise.all(peers.map((peer) => peer.waitForEvent("media", caller.length)))
    for (const peer of peers) {
      expect(agentMedia(peer)).toEqual(caller)
      for (const frame of agentVoice) peer.send({ event: "media", media: { payload: frame } })
    }
    await Promise.all(calls.map((call) => call.peer.waitForEvent("media", agentVoice.length)))
    for (const call of calls) expect(call.sentMedia()).toEqual(agentVoice)

    for (const call of calls) call.stop()
    await Promise.all(peers.map((peer) => peer.waitClosed()))
    for (const peer of peers) expect(peer.events("stop")).toHaveLength(1)
    for (const sid of sids) {
      await until(() => gateway.outbox.events.some((e) => e.callId === sid), "session.ended")
      expect(gateway.outbox.events.find((e) => e.callId === sid)).toMatchObject({ status: "completed", endReason: "caller_hangup" })
    }
  })

  it("works for Telnyx streams too", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { agentUrl: agents.url })
    const before = agents.peers.length
    const callId = `v3:${uniqueId("cc")}`
    const call = await telnyxCall(gateway, {
      token: gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId }),
      callControlId: callId
    })
    call.start()
    await until(() => agents.peers.length === before + 1, "the agent connection")
    const peer = agents.peers[before]!
    await peer.waitForEvent("start")
    expect(peer.events("start")[0].start.customParameters.provider).toBe("telnyx")
    peer.send({ event: "hangup" })
    await until(() => gateway.telnyx.commands(callId, "hangup").length === 1, "the hangup command")
  })

  it("a refused dial-out is a hard error at once", async () => {
    const agentId = uniqueId("agent")
    const port = await freePort()
    const env = await gateway.createEnvironment(agentId, { agentUrl: `ws://127.0.0.1:${port}/nobody-home` })
    const sid = callSid()
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: sid }), callSid: sid })
    call.start()
    await until(() => gateway.outbox.events.some((e) => e.callId === sid), "session.ended")
    expect(gateway.outbox.events.find((e) => e.callId === sid)).toMatchObject({ status: "failed", endReason: "agent_dial_failed" })
    expect(gateway.twilio.callUpdates(sid)[0]!.form).toEqual({ Status: "completed" })
  })

  it("an agent that never finishes the handshake fails the call after the connect timeout", async () => {
    const silent = await startSilentServer()
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { agentUrl: silent.url })
    const sid = callSid()
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: sid }), callSid: sid })
    const started = Date.now()
    call.start()
    await until(() => gateway.outbox.events.some((e) => e.callId === sid), "session.ended", 30_000)
    expect(Date.now() - started).toBeGreaterThanOrEqual(400)
    expect(gateway.outbox.events.find((e) => e.callId === sid)).toMatchObject({ status: "failed", endReason: "agent_dial_failed" })
    await silent.close()
  })

  it("an agent answering the upgrade with an HTTP error is a failed dial-out", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { agentUrl: `${gateway.wsBase}/v1/agents/${agentId}/environments/nope/connect` })
    const sid = callSid()
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: sid }), callSid: sid })
    call.start()
    await until(() => gateway.outbox.events.some((e) => e.callId === sid), "session.ended")
    expect(gateway.outbox.events.find((e) => e.callId === sid)).toMatchObject({ status: "failed", endReason: "agent_dial_failed" })
  })

  it("the caller hanging up while the dial-out is still connecting ends the session cleanly", async () => {
    const silent = await startSilentServer()
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { agentUrl: silent.url })
    const sid = callSid()
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: sid }), callSid: sid })
    call.start()
    await until(() => silent.sockets.length === 1, "the dial-out to start")
    call.stop()
    await until(() => gateway.outbox.events.some((e) => e.callId === sid), "session.ended")
    expect(gateway.outbox.events.find((e) => e.callId === sid)).toMatchObject({ status: "completed", endReason: "caller_hangup" })
    // The half-open dial-out was abandoned.
    await until(() => silent.sockets[0]!.closed, "the dial-out socket to close")
    await silent.close()
  })
})
