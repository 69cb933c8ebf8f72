import type { Socket } from "node:net"
import { Effect, Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { WebSocket } from "ws"
import { type CheckpointAgent, startCheckpointAgent } from "../../examples/agents/checkpoint-agent.js"
import { SessionStore } from "../../src/sessions/SessionStore.js"
import { twilioDialect } from "../../sim/CarrierDialect.js"
import { AGENT_NUMBER, CALLER, createEnvironment, getSession, waitForEnded } from "../fallback/liveCalls.js"
import { dialInAgent, type Gateway, sessionIdOf, startGateway, twilioCall, until } from "../livecall/callHarness.js"
import { startFakeGateway } from "../sim/fakeGateway.js"
import { ADMIN_KEY, uniqueId } from "../support/testApp.js"

/** The example agent of docs/calls.md, "Checkpoints": it checkpoints each digit and resumes from a checkpoint. */
describe("examples/agents/checkpoint-agent.ts", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway()
  })
  afterAll(() => gateway.close())

  it("against callgate: each digit the caller types is checkpointed, and callgate keeps the latest with the session", async () => {
    const env = await createEnvironment(gateway, {})
    const agent: CheckpointAgent = await startCheckpointAgent({
      gatewayUrl: gateway.httpBase,
      agentId: env.agentId,
      environmentId: env.environmentId,
      apiKey: ADMIN_KEY
    })
    try {
      await until(() => gateway.idleAgents(env.agentId, env.environmentId) === 1, "the example agent to be idle")
      const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
      const token = gateway.issueToken({ agentId: env.agentId, environmentId: env.environmentId, kind: "twilio", callId: callSid, from: CALLER, to: AGENT_NUMBER })
      const carrier = await twilioCall(gateway, { token, callSid })
      const started = new Promise<string>((resolve) => agent.once("call", (start) => resolve(start.customParameters["sessionId"]!)))
      carrier.start()
      const sessionId = await started
      const checkpointed: Array<string> = []
      agent.on("checkpointed", ({ digits }) => checkpointed.push(digits))
      for (const digit of ["4", "2", "#"]) carrier.dtmf(digit)
      await until(() => checkpointed.length === 3, "three checkpoints")
      expect(checkpointed).toEqual(["4", "42", "42#"])
      const deadline = Date.now() + 30_000
      let stored: Option.Option<unknown> = Option.none()
      while (Date.now() < deadline) {
        stored = await gateway.run(Effect.flatMap(SessionStore, (store) => store.checkpointOf(env.agentId, sessionId)))
        if (Option.isSome(stored) && JSON.stringify(stored.value) === JSON.stringify({ digits: "42#" })) break
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
      expect(Option.getOrNull(stored)).toEqual({ digits: "42#" })
      carrier.stop()
    } finally {
      await agent.close()
    }
  })

  it("against callgate: the agent holding the call dies; the example agent takes it over, resumes from the checkpoint and goes on from it", async () => {
    const env = await createEnvironment(gateway, {})
    // The first agent: a bare socket that checkpoints, then vanishes (no close handshake).
    const first = await dialInAgent(gateway, env.agentId, env.environmentId)
    await until(() => gateway.idleAgents(env.agentId, env.environmentId) === 1, "the first agent to be idle")
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const token = gateway.issueToken({ agentId: env.agentId, environmentId: env.environmentId, kind: "twilio", callId: callSid, from: CALLER, to: AGENT_NUMBER })
    const carrier = await twilioCall(gateway, { token, callSid })
    carrier.start()
    await first.waitForEvent("start")
    const sessionId = sessionIdOf(first)
    first.send({ event: "checkpoint", checkpoint: { digits: "42" } })
    const deadline = Date.now() + 30_000
    while (Option.isNone(await gateway.run(Effect.flatMap(SessionStore, (store) => store.checkpointOf(env.agentId, sessionId))))) {
      if (Date.now() > deadline) throw new Error("the first agent's checkpoint never reached the store")
      await new Promise((resolve) => setTimeout(resolve, 10))
    }

    const agent = await startCheckpointAgent({ gatewayUrl: gateway.httpBase, agentId: env.agentId, environmentId: env.environmentId, apiKey: ADMIN_KEY })
    try {
      await until(() => gateway.idleAgents(env.agentId, env.environmentId) === 1, "the example agent to be idle")
      const resumed = new Promise<{ digits: string; previousEndReason: string }>((resolve) => agent.once("resumed", resolve))
      const checkpointed: Array<string> = []
      agent.on("checkpointed", ({ digits }) => checkpointed.push(digits))
      ;(first.ws as unknown as { _socket: Socket })._socket.destroy()
      expect(await resumed).toEqual(expect.objectContaining({ digits: "42", previousEndReason: "agent_disconnected" }))
      carrier.dtmf("7")
      await until(() => checkpointed.length === 1, "the example agent's checkpoint")
      expect(checkpointed).toEqual(["427"])
      carrier.stop()
      const ended = await waitForEnded(gateway, callSid)
      expect(ended).toMatchObject({ status: "completed", endReason: "caller_hangup" })
      expect(await getSession(gateway, env.agentId, sessionId)).toMatchObject({ agentFailovers: 1 })
      expect(Option.getOrNull(await gateway.run(Effect.flatMap(SessionStore, (store) => store.checkpointOf(env.agentId, sessionId))))).toEqual({
        digits: "427"
      })
    } finally {
      await agent.close()
    }
  })

  it("taking a call over: `resume` restores the digits from the checkpoint, and the next checkpoint goes on from them", async () => {
    const fake = await startFakeGateway()
    const agent = await startCheckpointAgent({ gatewayUrl: fake.url, agentId: "agent_1", environmentId: "env_1", apiKey: "agent-key-0123456789" })
    try {
      const stream = await fake.stream(0)
      const dialect = twilioDialect({
        streamSid: "MZ1",
        accountSid: "AC0",
        callSid: "CA0",
        customParameters: { sessionId: "ses_1", resumed: "true", failover: "1" }
      })
      const resumed = new Promise<{ digits: string; previousEndReason: string }>((resolve) => agent.once("resumed", resolve))
      const send = (text: string) => stream.socket.readyState === WebSocket.OPEN && stream.socket.send(text)
      send(dialect.connected())
      send(dialect.start(1))
      send(
        JSON.stringify({
          event: "resume",
          sequenceNumber: "2",
          streamSid: "MZ1",
          resume: { checkpoint: { digits: "42" }, turns: [], previousEndReason: "agent_disconnected", heldAudioMs: 240 }
        })
      )
      expect(await resumed).toMatchObject({ digits: "42", previousEndReason: "agent_disconnected" })
      send(dialect.dtmf(3, "7"))
      expect(await stream.nth("checkpoint")).toEqual({ event: "checkpoint", checkpoint: { digits: "427" } })
    } finally {
      await agent.close()
      await fake.close()
    }
  })
})
