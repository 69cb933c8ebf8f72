import { Effect, Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MAX_CHECKPOINT_BYTES } from "../../src/kernel/CallLegs.js"
import { SessionStore } from "../../src/sessions/SessionStore.js"
import { CALLER_SPEECH, createEnvironment, getSession, placeCall, waitForEnded } from "../fallback/liveCalls.js"
import { type Gateway, sessionIdOf, startGateway } from "../livecall/callHarness.js"
import { type StoreKind, uniqueId } from "../support/testApp.js"

/**
 * An agent's checkpoints (docs/calls.md, "Checkpoints") on the production wiring: a dial-in agent
 * and a Twilio media stream over real sockets, the session store in memory or a real redis-server.
 * The latest checkpoint is kept with the session; a bad one gets `error` back and the call goes on.
 */
describe.each<StoreKind>(["memory", "redis"])("agent checkpoints (%s store)", (store) => {
  const prefix = `${uniqueId("cp")}:`
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ store, env: store === "redis" ? { REDIS_KEY_PREFIX: prefix } : {} })
  })
  afterAll(() => gateway.close())

  const checkpointOn = (on: Gateway, agentId: string, sessionId: string) =>
    on.run(Effect.flatMap(SessionStore, (sessions) => sessions.checkpointOf(agentId, sessionId)))

  /** Waits until the store holds `expected` for the session (the writes are off the media path). */
  const storedCheckpoint = async (on: Gateway, agentId: string, sessionId: string, expected: unknown) => {
    const deadline = Date.now() + 30_000
    for (;;) {
      const stored = await checkpointOn(on, agentId, sessionId)
      if (Option.isSome(stored) && JSON.stringify(stored.value) === JSON.stringify(expected)) return stored.value
      if (Date.now() > deadline) throw new Error(`the store did not get ${JSON.stringify(expected)}: ${JSON.stringify(stored)}`)
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
  }

  it("the latest checkpoint is stored with the session; too large or not an object: error back, the call goes on", async () => {
    const env = await createEnvironment(gateway, {})
    const call = await placeCall(gateway, env, "twilio")
    const agent = call.agent!
    const sessionId = sessionIdOf(agent)
    expect(Option.isNone(await checkpointOn(gateway, env.agentId, sessionId))).toBe(true)

    agent.send({ event: "checkpoint", checkpoint: { step: 1 } })
    await storedCheckpoint(gateway, env.agentId, sessionId, { step: 1 })
    // A burst: the writes coalesce, the last one stands.
    for (let step = 2; step <= 40; step++) agent.send({ event: "checkpoint", checkpoint: { step, slots: { party: step } } })
    const latest = { step: 40, slots: { party: 40 } }
    await storedCheckpoint(gateway, env.agentId, sessionId, latest)

    agent.send({ event: "checkpoint", checkpoint: { notes: "x".repeat(MAX_CHECKPOINT_BYTES) } })
    agent.send({ event: "checkpoint", checkpoint: ["not", "an", "object"] })
    const errors = await agent.waitForEvent("error", 2)
    expect(errors.map((e) => e.error.message)).toEqual([
      `invalid checkpoint: the checkpoint takes ${MAX_CHECKPOINT_BYTES + 12} bytes serialized, more than ${MAX_CHECKPOINT_BYTES}`,
      'invalid checkpoint: expected {"event":"checkpoint","checkpoint":{...}} with a JSON object'
    ])

    // The call goes on both ways, and the refused checkpoints replaced nothing.
    call.carrier.media(CALLER_SPEECH[0]!)
    await agent.waitFor((received) => received.some((m) => m.event === "media" && m.media.payload === CALLER_SPEECH[0]), "the caller's frame")
    agent.send({ event: "media", media: { payload: CALLER_SPEECH[1]! } })
    await call.carrier.peer.waitFor(() => call.carrier.sentMedia().includes(CALLER_SPEECH[1]!), "the agent's frame at the carrier")
    expect(Option.getOrNull(await checkpointOn(gateway, env.agentId, sessionId))).toEqual(latest)
    // Never forwarded to the carrier.
    expect(call.carrier.peer.received.filter((m) => m.event !== "media" && m.event !== "mark")).toEqual([])

    call.carrier.stop()
    const ended = await waitForEnded(gateway, call.callId)
    expect(ended).toMatchObject({ status: "completed", endReason: "caller_hangup" })
    expect(await getSession(gateway, env.agentId, sessionId)).not.toHaveProperty("checkpoint")
    expect(Option.getOrNull(await checkpointOn(gateway, env.agentId, sessionId))).toEqual(latest)

    if (store === "redis") {
      // Another instance on the same store reads it: it outlives the instance that took it.
      const other = await startGateway({ store, env: { REDIS_KEY_PREFIX: prefix } })
      try {
        expect(Option.getOrNull(await checkpointOn(other, env.agentId, sessionId))).toEqual(latest)
      } finally {
        await other.close()
      }
    }
  })
})
