import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import { isoAt } from "../../src/kernel/Time.js"
import { Sessions } from "../../src/sessions/Sessions.js"
import { type Gateway, startGateway, storedSession } from "../livecall/callHarness.js"
import { sampleSession } from "../sessions/SessionStore.contract.js"
import { makeTestApp, TEST_CLOCK_START, TEST_SECRETS_KEY, uniqueId } from "../support/testApp.js"

/**
 * A restarted instance reconciles what its previous run left (src/recovery/StartupReconciliation.ts;
 * docs/reliability.md, "Crash and restart"): the sessions of its instance id created before this run
 * began, and none created since. The run begins at the TestClock's time, so the line between the two
 * is exact: a millisecond before it is the previous run's.
 */
describe("startup reconciliation, on the TestClock", () => {
  let gateway: Gateway | undefined
  afterEach(async () => {
    await gateway?.close()
    gateway = undefined
  })

  it("rescues the session created a millisecond before the run began, leaves the one created as it began", async () => {
    const env = {
      REDIS_KEY_PREFIX: `${uniqueId("t")}:`,
      INSTANCE_ID: uniqueId("i"),
      SECRETS_KEY: TEST_SECRETS_KEY,
      DATA_DIR: mkdtempSync(join(tmpdir(), "callgate-startup-"))
    }
    const agentId = uniqueId("agent")
    const previous = sampleSession(agentId, { instanceId: env.INSTANCE_ID, callKind: "twilio", createdAt: isoAt(TEST_CLOCK_START - 1) })
    const current = sampleSession(agentId, { instanceId: env.INSTANCE_ID, callKind: "twilio", createdAt: isoAt(TEST_CLOCK_START) })
    // The store as the previous run left it (and as this run wrote its first session at once).
    const seed = await makeTestApp("redis", env)
    await seed.runtime.runPromise(Effect.flatMap(Sessions, (sessions) => Effect.zipRight(sessions.record(previous), sessions.record(current))))
    await seed.close()

    gateway = await startGateway({ store: "redis", clock: "test", env })
    const g = gateway
    // The previous run's: claimed, rescued through the carrier's REST API, ended, its session.ended queued.
    const ended = await g.outbox.forSession(previous.id)
    expect(ended).toMatchObject({ status: "failed", endReason: "instance_lost" })
    expect(await storedSession(g, agentId, previous.id)).toMatchObject({ status: "failed", endReason: "instance_lost" })
    expect(g.twilio.callUpdates(previous.callId).map((request) => request.form)).toEqual([{ Status: "completed" }])
    // This run's own (reconciled in the same pass, with far less to do): untouched.
    expect(await storedSession(g, agentId, current.id)).toEqual(current)
    expect(g.twilio.callUpdates(current.callId)).toEqual([])
    expect(g.outbox.events.map((event) => event.sessionId)).not.toContain(current.id)
  })
})
