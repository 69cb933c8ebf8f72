import { Effect, Option } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { entryUrl, postEntryWebhook, twilioSid, twilioSignature } from "../../sim/CallEntry.js"
import { LiveCallDrain } from "../../src/livecall/LiveCallDrain.js"
import { SessionTokens } from "../../src/telephony/SessionTokens.js"
import { type Gateway, startGateway } from "../livecall/callHarness.js"
import { ADMIN_KEY, adminAuth, uniqueId } from "../support/testApp.js"

/**
 * Placement at the call entry (docs/scaling.md, "Placement"), with two gateways as main.ts runs
 * them (in this process) on one real Redis: where the voice webhook's answer sends the stream,
 * and which agent the token reserves.
 */

describe("placement across two instances on one Redis", () => {
  const gateways: Array<Gateway> = []
  const agents: Array<SilentAgent> = []

  afterEach(async () => {
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    await Promise.all(gateways.splice(0).map((gateway) => gateway.close()))
  })

  const startPair = async () => {
    const prefix = `${uniqueId("place")}:`
    const [a, b] = await Promise.all(
      ["a", "b"].map((id) =>
        startGateway({ store: "redis", env: { REDIS_KEY_PREFIX: prefix, INSTANCE_ID: `inst-${id}`, PUBLIC_URL: `https://${id}.callgate.test` } })
      )
    )
    gateways.push(a!, b!)
    return [a!, b!] as const
  }

  const dialIn = async (gateway: Gateway, agentId: string, environmentId: string, capacity = 1) => {
    const agent = await startSilentAgent({ gatewayUrl: gateway.httpBase, agentId, environmentId, apiKey: ADMIN_KEY, capacity })
    agents.push(agent)
    await agent.ready()
    return agent
  }

  /** Waits until the registry (read through `gateway`) shows these idle agents per instance. */
  const registryShows = async (gateway: Gateway, agentId: string, expected: Record<string, number>) => {
    for (;;) {
      const response = await fetch(`${gateway.httpBase}/v1/instances`, { headers: adminAuth })
      const instances = ((await response.json()) as { data: { instances: Array<{ id: string; idleAgents: Array<{ agentId: string; idle: number }> }> } }).data.instances
      const idle = Object.fromEntries(
        instances.map((entry) => [entry.id, entry.idleAgents.filter((e) => e.agentId === agentId).reduce((sum, e) => sum + e.idle, 0)])
      )
      if (Object.entries(expected).every(([id, n]) => (idle[id] ?? 0) === n)) return
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }

  /** The voice webhook answered by `gateway`: the stream URL's host and the token's placement claims. */
  const place = async (gateway: Gateway, agentId: string, environmentId: string) => {
    const params = { CallSid: twilioSid("CA"), AccountSid: twilioSid("AC"), Direction: "inbound" }
    const publicUrl = gateway === gateways[0] ? "https://a.callgate.test" : "https://b.callgate.test"
    const signature = twilioSignature(gateway.twilio.authToken, entryUrl(publicUrl, "telephony/twilio/voice", agentId, environmentId), params)
    const answer = await postEntryWebhook(entryUrl(gateway.httpBase, "telephony/twilio/voice", agentId, environmentId), params, {
      "X-Twilio-Signature": signature
    })
    const claims = await gateway.run(Effect.map(SessionTokens, (tokens) => tokens.verify(answer.stream.parameters.token!)))
    const { placedOn, agentSocket } = Option.getOrThrow(claims)
    return { host: new URL(answer.stream.url).host, placedOn, agentSocket }
  }

  it("a dial-in call goes to this instance's idle agent first, otherwise to the instance that has one, each agent reserved once", async () => {
    const [a, b] = await startPair()
    const agentId = uniqueId("agent")
    const { id: environmentId } = await a.createEnvironment(agentId)
    await dialIn(a, agentId, environmentId, 1)
    await dialIn(b, agentId, environmentId, 2)
    await registryShows(a, agentId, { "inst-a": 1, "inst-b": 2 })

    const first = await place(a, agentId, environmentId)
    expect(first).toMatchObject({ host: "a.callgate.test", placedOn: "inst-a" })
    expect(first.agentSocket).toMatch(/^inst-a\./)
    // a's only agent is held: the next two go to b, to two different agents.
    const second = await place(a, agentId, environmentId)
    const third = await place(a, agentId, environmentId)
    for (const placed of [second, third]) expect(placed).toMatchObject({ host: "b.callgate.test", placedOn: "inst-b" })
    expect(second.agentSocket).not.toBe(third.agentSocket)
    // None idle anywhere: the stream stays here, with no agent (rescued at once when it starts).
    expect(await place(b, agentId, environmentId)).toEqual({ host: "b.callgate.test", placedOn: "inst-b", agentSocket: undefined })
  })

  it("a reservation whose stream never comes is released after 10 s", async () => {
    const [a, b] = await startPair()
    const agentId = uniqueId("agent")
    const { id: environmentId } = await a.createEnvironment(agentId)
    await dialIn(b, agentId, environmentId, 1)
    await registryShows(a, agentId, { "inst-b": 1 })
    const held = await place(a, agentId, environmentId)
    expect(held.placedOn).toBe("inst-b")
    const reservedAt = Date.now()
    expect((await place(a, agentId, environmentId)).agentSocket).toBeUndefined()
    // Placing again until b's agent is offered again: it is the same socket, and not before the hold lapsed.
    for (;;) {
      const again = await place(a, agentId, environmentId)
      if (again.agentSocket !== undefined) {
        expect(again).toEqual(held)
        // Not released early (a lower bound only: slowness can only make it later).
        expect(Date.now() - reservedAt).toBeGreaterThanOrEqual(5_000)
        return
      }
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
  })

  it("a dial-out call stays here; on a draining instance it goes to a live one, dial-in to where the agent is", async () => {
    const [a, b] = await startPair()
    const agentId = uniqueId("agent")
    const dialOut = await a.createEnvironment(agentId, { agentUrl: "wss://agent.example.com/calls" })
    const { id: dialInEnv } = await a.createEnvironment(agentId)
    await dialIn(b, agentId, dialInEnv, 1)
    await registryShows(a, agentId, { "inst-b": 1 })
    expect((await place(a, agentId, dialOut.id)).host).toBe("a.callgate.test")

    await a.run(Effect.flatMap(LiveCallDrain, (sessions) => sessions.drain))
    expect((await place(a, agentId, dialOut.id)).host).toBe("b.callgate.test")
    expect(await place(a, agentId, dialInEnv)).toMatchObject({ host: "b.callgate.test", placedOn: "inst-b" })
  })
})
