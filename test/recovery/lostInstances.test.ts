import { Effect, TestClock } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import { InstanceStore } from "../../src/fleet/InstanceStore.js"
import { nowIso } from "../../src/kernel/Time.js"
import { Sessions } from "../../src/sessions/Sessions.js"
import { type Gateway, startGateway, storedSession } from "../livecall/callHarness.js"
import { sampleSession } from "../sessions/SessionStore.contract.js"
import { uniqueId } from "../support/testApp.js"

/**
 * The fleet rescues a lost instance's calls (src/fleet/LostInstances.ts; docs/reliability.md,
 * "Instance loss") once the instance has not refreshed for INSTANCE_TTL, never before: the whole
 * gateway (appLayer) on the TestClock, the age moved by the test, the rescue through the fake
 * Twilio's REST API.
 */
describe("lost instances, on the TestClock", () => {
  let gateway: Gateway | undefined
  afterEach(async () => {
    await gateway?.close()
    gateway = undefined
  })

  /** Waits (without moving the clock) for what the last adjustment set off: the sweep's rescue. */
  const eventually = async (check: () => Promise<boolean>, what: string) => {
    for (let tries = 0; !(await check()); tries++) {
      if (tries === 500) throw new Error(`never: ${what}`)
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
  }

  it("a session of an instance silent for INSTANCE_TTL is rescued at the next sweep; one silent for less is left alone", async () => {
    gateway = await startGateway({ clock: "test", env: { INSTANCE_TTL: "10s" } })
    const g = gateway
    const agentId = uniqueId("agent")
    const { id: environmentId } = await g.createEnvironment(agentId)
    const lost = uniqueId("lost")
    // The other instance refreshes once, now, and owns a live call; then it goes silent.
    const session = await g.run(
      Effect.gen(function* () {
        const store = yield* InstanceStore
        yield* store.report({ id: lost, publicUrl: "https://lost.callgate.test", draining: false, liveCalls: 1, startedAt: yield* nowIso, idleAgents: [] }, 10_000)
        const session = sampleSession(agentId, { environmentId, instanceId: lost, callKind: "twilio", createdAt: yield* nowIso })
        yield* Effect.flatMap(Sessions, (sessions) => sessions.record(session))
        return session
      })
    )
    const untouched = async () => (await storedSession(g, agentId, session.id)).status === "active" && g.twilio.callUpdates(session.callId).length === 0

    // Silent for 10 s: not gone yet (gone is longer than INSTANCE_TTL), however many sweeps (every 2 s) ran.
    for (let second = 1; second <= 10; second++) {
      await g.run(TestClock.adjust("1 second"))
      expect(await untouched(), `rescued after ${second} s of silence`).toBe(true)
    }
    // Past it: the next sweep (at most REFRESH_INTERVAL, 2 s, later) claims and rescues it once.
    await g.run(TestClock.adjust("2 seconds"))
    await eventually(async () => (await storedSession(g, agentId, session.id)).status !== "active", "the session claimed")
    await eventually(async () => g.twilio.callUpdates(session.callId).length > 0, "the REST hang-up")
    expect(await storedSession(g, agentId, session.id)).toMatchObject({ status: "failed", endReason: "instance_lost" })
    expect(g.twilio.callUpdates(session.callId).map((request) => request.form)).toEqual([{ Status: "completed" }])
  })
})
