import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { uniqueId } from "../support/testApp.js"
import {
  agentMedia,
  audioFrames,
  type CarrierCall,
  dialInAgent,
  type Gateway,
  type Peer,
  sessionIdOf,
  startGateway,
  telnyxCall,
  twilioCall,
  until
} from "./callHarness.js"

const speech = [
  audioFrames("caller-appointment.ulaw"),
  audioFrames("caller-account.ulaw"),
  audioFrames("caller-appointment-noisy.ulaw"),
  audioFrames("agent-greeting.ulaw")
]

/**
 * Real speech frames, each stamped in its first two bytes with who sent it and its position, so a
 * frame that reached the wrong call (or came out of order) is told apart from silence that
 * happens to look the same.
 */
const stampedFrames = (source: number, owner: number, count: number, offset = 0) => {
  const frames = speech[source % speech.length]!
  return Array.from({ length: count }, (_, n) => {
    const bytes = Buffer.from(frames[(offset + n) % frames.length]!, "base64")
    bytes[0] = owner
    bytes[1] = n
    return bytes.toString("base64")
  })
}
const ownerOf = (payload: string) => Buffer.from(payload, "base64")[0]!

interface LiveCall {
  readonly call: CarrierCall
  readonly callId: string
  readonly index: number
}

describe("many calls on one gateway", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway()
  })
  afterAll(() => gateway.close())

  /** Opens `count` calls (Twilio and Telnyx alternating) on one environment with `count` idle agents. */
  const openCalls = async (count: number, firstIndex = 0) => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agents = await Promise.all(Array.from({ length: count }, () => dialInAgent(gateway, agentId, env.id)))
    await until(() => gateway.idleAgents(agentId, env.id) === count, `${count} idle agents`)
    const calls: Array<LiveCall> = await Promise.all(
      Array.from({ length: count }, async (_, i): Promise<LiveCall> => {
        const index = firstIndex + i
        if (index % 2 === 0) {
          const callId = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
          const token = gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId })
          return { call: await twilioCall(gateway, { token, callSid: callId }), callId, index }
        }
        const callId = `v3:${uniqueId("cc")}`
        const token = gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId })
        return { call: await telnyxCall(gateway, { token, callControlId: callId }), callId, index }
      })
    )
    for (const { call } of calls) call.start()
    await Promise.all(agents.map((agent) => agent.waitForEvent("start")))
    return { agentId, env, agents, calls }
  }

  /** The agent that serves `call`: the one whose caller frames carry the call's stamp. */
  const agentOf = (agents: Array<Peer>, index: number) => agents.find((agent) => agentMedia(agent).some((p) => ownerOf(p) === index))

  it("50 concurrent calls: every call's audio reaches only its own agent, and the agent's only its caller", async () => {
    const { agents, calls } = await openCalls(50)
    const frames = 50
    const sent = new Map(calls.map(({ index }) => [index, stampedFrames(index, index, frames, index * 7)]))
    // Interleave: frame n of every call before frame n+1 of any.
    for (let n = 0; n < frames; n++) for (const { call, index } of calls) call.media(sent.get(index)![n]!)
    await Promise.all(agents.map((agent) => agent.waitForEvent("media", frames, 15_000)))

    const served = new Set<Peer>()
    for (const { index } of calls) {
      const agent = agentOf(agents, index)
      expect(agent, `call ${index} reached an agent`).toBeDefined()
      expect(served.has(agent!), `agent of call ${index} serves one call only`).toBe(false)
      served.add(agent!)
      expect(agentMedia(agent!)).toEqual(sent.get(index))
    }

    // Each agent answers with audio stamped with its call's index + 100; each carrier gets only its own.
    const answers = new Map(calls.map(({ index }) => [index, stampedFrames(index + 1, 100 + index, 30)]))
    for (const { index } of calls) {
      const agent = agentOf(agents, index)!
      for (const payload of answers.get(index)!) agent.send({ event: "media", media: { payload } })
    }
    await Promise.all(calls.map(({ call }) => call.peer.waitForEvent("media", 30, 15_000)))
    for (const { call, index } of calls) expect(call.sentMedia()).toEqual(answers.get(index))

    for (const { call } of calls) call.stop()
    await Promise.all(agents.map((agent) => agent.waitClosed()))
    await until(() => calls.every(({ callId }) => gateway.outbox.events.some((e) => e.callId === callId)), "50 session.ended")
    for (const { callId } of calls) expect(gateway.outbox.events.find((e) => e.callId === callId)!.status).toBe("completed")
  })

  /** Each fuzz case: what the bad carrier sends after `start`, and the close code it must get. */
  const carrierFuzz: Array<{ name: string; send: (call: CarrierCall) => void; code: number }> = [
    { name: "not JSON", send: (call) => call.peer.send("{not json"), code: 1007 },
    { name: "JSON that is not an object", send: (call) => call.peer.send("[1,2,3]"), code: 1007 },
    { name: "a binary message", send: (call) => call.peer.ws.send(Buffer.from([1, 2, 3])), code: 1003 },
    { name: "an unknown event", send: (call) => call.peer.send({ event: "explode", stream_id: call.streamId, streamSid: call.streamId }), code: 1003 },
    { name: "media without a payload", send: (call) => call.peer.send({ event: "media", streamSid: call.streamId, stream_id: call.streamId, media: { chunk: "1" } }), code: 1007 },
    {
      name: "a payload that would break out of the JSON string",
      send: (call) =>
        call.peer.send({ event: "media", streamSid: call.streamId, stream_id: call.streamId, media: { chunk: "1", payload: '"},"event":"hangup' } }),
      code: 1007
    },
    { name: "a message over the 64 KiB limit", send: (call) => call.peer.send("x".repeat(70 * 1024)), code: 1009 },
    { name: "a DTMF digit that is not a key", send: (call) => call.peer.send({ event: "dtmf", streamSid: call.streamId, stream_id: call.streamId, dtmf: { digit: "hello" } }), code: 1007 },
    { name: "a second start", send: (call) => call.start(), code: 1002 },
    { name: "wrong types everywhere", send: (call) => call.peer.send({ event: "mark", streamSid: 5, stream_id: 5, mark: { name: ["x"] } }), code: 1007 }
  ]

  it("malformed carrier frames close only that call; 20 concurrent calls carry on intact", async () => {
    const good = await openCalls(20)
    const sent = new Map(good.calls.map(({ index }) => [index, stampedFrames(index, index, 60)]))
    const sendFrames = (from: number, to: number) => {
      for (let n = from; n < to; n++) for (const { call, index } of good.calls) call.media(sent.get(index)![n]!)
    }
    sendFrames(0, 20)

    const bad = await openCalls(carrierFuzz.length * 2, 200)
    for (const [i, { call }] of bad.calls.entries()) {
      const fuzz = carrierFuzz[Math.floor(i / 2)]!
      call.media(stampedFrames(0, 200 + i, 1)[0]!)
      fuzz.send(call)
      sendFrames(20 + i, 21 + i) // the good calls keep talking meanwhile
    }
    for (const [i, { call }] of bad.calls.entries()) {
      const fuzz = carrierFuzz[Math.floor(i / 2)]!
      const closed = await call.peer.waitClosed()
      expect(closed.code, `${fuzz.name} (${call.streamId})`).toBe(fuzz.code)
      // ws closes an oversized message with 1009 itself, without a reason; every other refusal says why.
      if (fuzz.code !== 1009) expect(closed.reason.length).toBeGreaterThan(0)
    }
    // Every bad call's session ended on its own, as a carrier failure, and its agent was released.
    await Promise.all(bad.agents.map((agent) => agent.waitClosed()))
    for (const agent of bad.agents) {
      const ended = await gateway.outbox.forSession(sessionIdOf(agent))
      expect(ended.status).toBe("failed")
      expect(["carrier_protocol_error", "carrier_stream_error"]).toContain(ended.endReason)
    }

    sendFrames(20 + bad.calls.length, 60)
    await Promise.all(good.agents.map((agent) => agent.waitForEvent("media", 60, 15_000)))
    for (const { index } of good.calls) expect(agentMedia(agentOf(good.agents, index)!)).toEqual(sent.get(index))
    for (const agent of good.agents) expect(agent.closed).toBeUndefined()
    for (const { call } of good.calls) call.stop()
    await until(() => good.calls.every(({ callId }) => gateway.outbox.events.some((e) => e.callId === callId)), "20 session.ended")
    for (const { callId } of good.calls) expect(gateway.outbox.events.find((e) => e.callId === callId)!.status).toBe("completed")
  })

  it("malformed agent messages fail only that agent's call", async () => {
    const good = await openCalls(20)
    const bad = await openCalls(6, 300)
    const agentFuzz: Array<{ send: (agent: Peer) => void; code: number }> = [
      { send: (agent) => agent.send("nope"), code: 1007 },
      { send: (agent) => agent.send({ event: "dance" }), code: 1003 },
      { send: (agent) => agent.send({ event: "media", media: { payload: "not base64!" } }), code: 1007 },
      { send: (agent) => agent.send({ event: "transfer", transfer: {} }), code: 1007 },
      { send: (agent) => agent.ws.send(Buffer.alloc(10)), code: 1003 },
      { send: (agent) => agent.send("y".repeat(65 * 1024)), code: 1009 }
    ]
    for (const [i, agent] of bad.agents.entries()) agentFuzz[i]!.send(agent)
    for (const [i, agent] of bad.agents.entries()) expect((await agent.waitClosed()).code).toBe(agentFuzz[i]!.code)
    for (const agent of bad.agents) {
      const ended = await gateway.outbox.forSession(sessionIdOf(agent))
      expect(ended.status).toBe("failed")
    }

    const sent = new Map(good.calls.map(({ index }) => [index, stampedFrames(index, index, 25)]))
    for (let n = 0; n < 25; n++) for (const { call, index } of good.calls) call.media(sent.get(index)![n]!)
    await Promise.all(good.agents.map((agent) => agent.waitForEvent("media", 25)))
    for (const { index } of good.calls) expect(agentMedia(agentOf(good.agents, index)!)).toEqual(sent.get(index))
    for (const { call } of good.calls) call.stop()
    await Promise.all(good.agents.map((agent) => agent.waitClosed()))
  })
})
