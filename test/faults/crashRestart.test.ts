import { afterEach, describe, expect, inject, it } from "vitest"
import { type Rig, sleep, startRig, until } from "./faultRig.js"

/**
 * A single instance on Redis dies with live calls (SIGKILL: no drain, no finalizer) and is started
 * again with the same instance id: at start it claims the sessions its previous run left active,
 * rescues each call through the carrier's REST API (the environment's fallback type is disabled:
 * a hang-up) and ends each session failed / instance_lost with its session.ended delivered.
 */
describe("a single instance killed with live calls, then restarted", () => {
  let rig: Rig | undefined

  afterEach(async () => {
    await rig?.close()
    rig = undefined
  })

  it("SIGKILL with 10 live calls, restart after 3 s: 10/10 sessions terminal, 10/10 session.ended delivered", async () => {
    rig = await startRig(inject("redisUrl"))
    const live = rig
    const calls = await live.placeCalls(10)
    const active = await until(live.sessions, (sessions) => sessions.filter((s) => s.status === "active").length === 10, "10 active sessions")
    expect(new Set(active.map((s) => s.instanceId)).size).toBe(1)

    expect(await live.gateway.stop("SIGKILL")).toEqual({ code: null, signal: "SIGKILL" })
    await Promise.all(calls.map(({ call }) => call.closed))
    await sleep(3000)
    await live.restart()

    const sessions = await until(live.sessions, (all) => all.length === 10 && all.every((s) => s.status !== "active"), "10 terminal sessions")
    for (const session of sessions) expect(session).toMatchObject({ status: "failed", endReason: "instance_lost" })
    const events = await until(live.endedEvents, (events) => events.length >= 10, "10 session.ended")
    expect(new Set(events.map((e) => e.sessionId))).toEqual(new Set(sessions.map((s) => s.id)))
    for (const event of events) expect(event).toMatchObject({ status: "failed", endReason: "instance_lost" })
    // Each caller was rescued: the fallback is disabled, so the call is hung up through REST.
    for (const { callSid } of calls) {
      expect(live.twilio.callUpdates(callSid).map((r) => r.form)).toEqual([{ Status: "completed" }])
    }
    expect(live.gateway.stdout()).toContain("the previous run's sessions are reconciled")
    // Exactly one each, once the outbox is quiet (the receiver answers 200 to every attempt).
    expect(live.endedEvents()).toHaveLength(10)
  }, 240_000)
})
