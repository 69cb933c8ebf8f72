import { Effect } from "effect"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import type { LeaseKind } from "../../src/sessions/CallLeaseStore.js"
import { CallLeases } from "../../src/sessions/CallLeases.js"
import { makeTestApp, type TestApp } from "../support/testApp.js"

/**
 * CallLeases on the production graph over the TestClock (docs/scaling.md, "Fleet-wide call
 * limits"): the instance that carries a call renews its lease for as long as it holds it, so a
 * call longer than INSTANCE_TTL keeps its place, while a lease nobody holds lapses at
 * INSTANCE_TTL. The renewals run only while a lease is held: they stop with the last release and
 * start again with the next hold.
 */
describe("call leases (memory store, TestClock)", () => {
  let t: TestApp
  beforeEach(async () => {
    t = await makeTestApp("memory", { INSTANCE_TTL: "10s" }, { clock: "test" })
  })
  afterEach(async () => {
    await t.close()
  })

  const lease = (sessionId: string, kind: LeaseKind = "inbound") => ({ agentId: "agent_leases", environmentId: "env_leases", sessionId, kind })
  const limits = { total: 2, outbound: null }
  const acquire = (sessionId: string, hold: boolean) => t.runtime.runPromise(Effect.flatMap(CallLeases, (leases) => leases.acquire(lease(sessionId), limits, { hold })))
  const release = (sessionId: string) => t.runtime.runPromise(Effect.flatMap(CallLeases, (leases) => leases.release("agent_leases", "env_leases", sessionId)))
  const held = async () => (await t.runtime.runPromise(Effect.flatMap(CallLeases, (leases) => leases.count("agent_leases", "env_leases")))).total
  /** Moves the clock 30 s (three INSTANCE_TTLs), a renewal interval at a time. */
  const thirtySeconds = async () => {
    for (let i = 0; i < 15; i++) await t.adjustClock("2 seconds")
  }

  it("a held lease outlives INSTANCE_TTL, one nobody holds lapses; renewals stop with the last release and start with the next hold", async () => {
    expect(await acquire("held-1", true)).toEqual({ _tag: "Granted" })
    expect(await acquire("unheld", false)).toEqual({ _tag: "Granted" })
    expect(await held()).toBe(2)
    expect(await acquire("refused", true)).toMatchObject({ _tag: "Refused", limit: "maxConcurrentCalls", max: 2 })

    await thirtySeconds()
    // The lease this instance holds was renewed; the one taken for a stream that never came lapsed.
    expect(await held()).toBe(1)

    await release("held-1")
    expect(await held()).toBe(0)
    await thirtySeconds()

    // After an idle spell the next held lease is renewed again.
    expect(await acquire("held-2", true)).toEqual({ _tag: "Granted" })
    await thirtySeconds()
    expect(await held()).toBe(1)
    await release("held-2")
    expect(await held()).toBe(0)
  })
})
