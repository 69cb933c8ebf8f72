import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ApiKeys } from "../../src/apikeys/ApiKeys.js"
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
} from "../livecall/callHarness.js"
import { uniqueId } from "../support/testApp.js"

const caller = audioFrames("caller-appointment.ulaw", 25)

describe("dial-in agent connections", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway()
  })
  afterAll(() => gateway.close())

  const keyFor = (agentIds: Array<string>) =>
    gateway.run(Effect.flatMap(ApiKeys, (keys) => keys.create({ name: "worker", agentIds }))).then((created) => created.key)

  const placeCall = async (agentId: string, environmentId: string) => {
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId, kind: "twilio", callId: callSid }), callSid })
    call.start()
    return { call, callSid }
  }

  it("refuses the upgrade without a valid key (401), with another agent's key (403), for an unknown environment (404)", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const url = `${gateway.wsBase}/v1/agents/${agentId}/environments/${env.id}/connect`
    expect(await refusedUpgrade(url)).toEqual({ status: 401, code: "UNAUTHORIZED" })
    expect(await refusedUpgrade(url, { authorization: "Bearer not-a-key" })).toEqual({ status: 401, code: "UNAUTHORIZED" })
    const otherKey = await keyFor([uniqueId("other")])
    expect(await refusedUpgrade(url, { authorization: `Bearer ${otherKey}` })).toEqual({ status: 403, code: "FORBIDDEN" })
    const ownKey = await keyFor([agentId])
    expect(await refusedUpgrade(`${gateway.wsBase}/v1/agents/${agentId}/environments/env_missing/connect`, { authorization: `Bearer ${ownKey}` })).toEqual({
      status: 404,
      code: "NOT_FOUND"
    })
    expect(gateway.idleAgents(agentId, env.id)).toBe(0)

    // The agent's own scoped key is accepted: one unit of capacity.
    const agent = await dialInAgent(gateway, agentId, env.id, ownKey)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
    agent.close()
  })

  it("each socket is capacity for one call; a call takes one at once; sockets are never reused", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const workers = [await dialInAgent(gateway, agentId, env.id), await dialInAgent(gateway, agentId, env.id)]
    await until(() => gateway.idleAgents(agentId, env.id) === 2, "two idle agents")

    const first = await placeCall(agentId, env.id)
    const second = await placeCall(agentId, env.id)
    await until(() => workers.every((w) => w.events("start").length === 1), "both workers to get a call")
    expect(gateway.idleAgents(agentId, env.id)).toBe(0)
    // Each worker has exactly one call, and different ones.
    expect(sessionIdOf(workers[0]!)).not.toBe(sessionIdOf(workers[1]!))

    // A third call finds no idle agent: a hard error, at once.
    const third = await placeCall(agentId, env.id)
    await until(() => gateway.outbox.events.some((e) => e.callId === third.callSid), "third call to end")
    expect(gateway.outbox.events.find((e) => e.callId === third.callSid)!.endReason).toBe("no_idle_agent")

    // The first call ends: its worker is sent stop and closed, not returned to the pool.
    first.call.stop()
    await until(() => workers.some((w) => w.closed !== undefined), "a worker to be closed")
    const [served] = workers.filter((w) => w.closed !== undefined)
    expect(served!.events("stop")).toHaveLength(1)
    expect(served!.closed!.code).toBe(1000)
    expect(workers.filter((w) => w.closed === undefined)).toHaveLength(1)
    expect(gateway.idleAgents(agentId, env.id)).toBe(0)
    const fourth = await placeCall(agentId, env.id)
    await until(() => gateway.outbox.events.some((e) => e.callId === fourth.callSid), "fourth call to end")
    expect(gateway.outbox.events.find((e) => e.callId === fourth.callSid)!.endReason).toBe("no_idle_agent")
    // No worker ever saw a second start.
    expect(workers.map((w) => w.events("start").length)).toEqual([1, 1])
    second.call.stop()
    await until(() => workers.every((w) => w.closed !== undefined), "both workers closed")
  })

  it("a worker that reconnects after its call offers capacity again", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    for (let round = 0; round < 3; round++) {
      const worker = await dialInAgent(gateway, agentId, env.id)
      await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
      const { call } = await placeCall(agentId, env.id)
      for (const frame of caller) call.media(frame)
      await worker.waitForEvent("media", caller.length)
      expect(agentMedia(worker)).toEqual(caller)
      call.stop()
      await worker.waitClosed()
    }
  })

  it("an idle socket that closes is removed from the pool", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const worker = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
    worker.ws.close(1000)
    await until(() => gateway.idleAgents(agentId, env.id) === 0, "the pool to forget the socket")
  })

})

// Pings on a short interval, on a gateway of their own: the interval is the time a socket has to
// answer, so it must stay well above how long a busy machine can stall this process (the other
// tests keep the default, and never see a ping check).
describe("dial-in agent connections: pings", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: { AGENT_PING_INTERVAL: "1s" } })
  })
  afterAll(() => gateway.close())

  const placeCall = async (agentId: string, environmentId: string) => {
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId, kind: "twilio", callId: callSid }), callSid })
    call.start()
    return { call, callSid }
  }

  it("idle sockets are pinged; one that stops answering is cut and pruned", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const alive = await dialInAgent(gateway, agentId, env.id)
    let alivePings = 0
    alive.ws.on("ping", () => void alivePings++)
    const dead = await dialInAgent(gateway, agentId, env.id, undefined, { autoPong: false })
    await until(() => gateway.idleAgents(agentId, env.id) === 2, "two idle agents")
    await dead.waitClosed(10_000)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "the dead socket to be pruned")
    // The live one keeps answering pings and stays: the pool pings it three more times after the
    // prune, so its answers were checked at least twice by the rule that cut the dead one.
    const pingsAtPrune = alivePings
    await until(() => alivePings >= pingsAtPrune + 3, "three more pings of the live socket", 30_000)
    expect(alive.closed).toBeUndefined()
    expect(gateway.idleAgents(agentId, env.id)).toBe(1)
    alive.close()
  })

  it("an agent in a call that stops answering pings fails the call", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const worker = await dialInAgent(gateway, agentId, env.id, undefined, { autoPong: false })
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
    await placeCall(agentId, env.id)
    await worker.waitForEvent("start")
    const sessionId = sessionIdOf(worker)
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_disconnected" })
  })
})
