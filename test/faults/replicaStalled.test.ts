import { spawnSync } from "node:child_process"
import { afterEach, describe, expect, it } from "vitest"
import { type RedisSentinelSet, startRedisSentinelSet } from "../support/redisSentinel.js"
import { adminAuth } from "../support/testApp.js"
import { type LiveCall, type Rig, startRig, until } from "./faultRig.js"

/**
 * No replica confirms in time (docs/scaling.md, "Nothing acknowledged is lost"): a Sentinel set's
 * replica is SIGSTOPped with live calls, so the primary still counts it connected (until
 * `repl-timeout`, 60 s) and REDIS_WAIT_REPLICAS=auto waits for it, but it confirms nothing within
 * REDIS_WAIT_TIMEOUT (500 ms). What must happen: an API write answers 503 UNAVAILABLE saying no
 * replica confirmed it; the session ends of calls that hang up meanwhile are kept by the journal
 * (callgate_session_end_backlog) and retried; once the replica runs again every end is written,
 * every session.ended delivered once, and API writes are taken. Then the primary is SIGKILLed: the
 * replica it fails over to holds every end, so nothing the stall held back was lost.
 */

const CALLS = 10

const hangUp = (calls: ReadonlyArray<LiveCall>) => Promise.all(calls.map(({ call }) => call.hangup()))

const backlog = async (rig: Rig) => {
  const text = await (await fetch(`${rig.gateway.baseUrl}/metrics`)).text()
  const match = /^callgate_session_end_backlog (\d+)/m.exec(text)
  return match === null ? -1 : Number(match[1])
}

/** An API write (an environment's record and the agent's index): its status and error body. */
const createEnvironment = async (rig: Rig, name: string) => {
  const res = await fetch(`${rig.gateway.baseUrl}/v1/agents/${rig.agentId}/environments`, {
    method: "POST",
    headers: { ...adminAuth, "content-type": "application/json" },
    body: JSON.stringify({ name })
  })
  return { status: res.status, body: (await res.json()) as { error?: { code: string; message: string } } }
}

const deliveryStates = async (rig: Rig) => {
  const res = await fetch(`${rig.gateway.baseUrl}/v1/agents/${rig.agentId}/environments/${rig.environmentId}/webhook-deliveries?limit=100`, {
    headers: adminAuth
  })
  if (res.status !== 200) return []
  return ((await res.json()) as { data: { deliveries: Array<{ state: string; sessionId: string }> } }).data.deliveries
}

/**
 * Whether every sentinel sees the replica healthy again (flags just `slave`, its link to the
 * primary up): a replica the sentinels still hold for down, or whose link they saw down for long,
 * is not promoted, so the failover at the end would stall.
 */
const sentinelsSeeReplicaUp = (set: RedisSentinelSet) =>
  set.ports.sentinels.every((port) => {
    const lines = spawnSync("redis-cli", ["-p", String(port), "--no-auth-warning", "-a", set.sentinelPassword, "sentinel", "replicas", set.name], {
      encoding: "utf8"
    }).stdout.split("\n")
    const field = (name: string) => lines[lines.indexOf(name) + 1]?.trim()
    return field("flags") === "slave" && field("master-link-status") === "ok" && field("master-link-down-time") === "0"
  })

describe("Redis replica that stops confirming writes", () => {
  let sentinel: RedisSentinelSet | undefined
  let rig: Rig | undefined

  afterEach(async () => {
    await rig?.close()
    await sentinel?.stop()
    rig = sentinel = undefined
  })

  it(`Sentinel: the replica SIGSTOPped with ${CALLS} live calls: API writes 503, ends kept, all delivered once it confirms again, none lost in a failover after`, async () => {
    sentinel = await startRedisSentinelSet()
    const set = sentinel
    rig = await startRig("", set.env)
    const live = rig
    const calls = await live.placeCalls(CALLS)
    await until(live.sessions, (sessions) => sessions.filter((s) => s.status === "active").length === CALLS, `${CALLS} active sessions`)
    const early = calls.slice(0, CALLS / 2)
    const late = calls.slice(CALLS / 2)

    set.pause(set.ports.replica)
    // An API write the replica does not confirm: 503, saying what happened and what to do.
    const refused = await createEnvironment(live, "while the replica is stopped")
    expect(refused.status).toBe(503)
    expect(refused.body.error?.code).toBe("UNAVAILABLE")
    expect(refused.body.error?.message).toMatch(/^No Redis replica confirmed this change within 500 ms: .*Check whether it took effect, then retry\.$/)

    // Calls ending now: their ends are kept by the journal, which says why once.
    await hangUp(early)
    await until(() => backlog(live), (n) => n === early.length, `${early.length} session ends kept`)
    const said = live.gateway.stdout().split("\n").filter((line) => line.includes("confirmed a session end within 500 ms"))
    expect(said).toHaveLength(1)
    expect(said[0]).toContain(`no replica of the store at Redis Sentinel primary ${set.name}`)
    expect(live.gateway.stdout()).not.toContain(set.password)
    // The calls still live keep their media: nothing on the media path waits for a replica.
    for (const { call } of late) expect(call.isOpen).toBe(true)

    set.resume(set.ports.replica)
    await until(() => backlog(live), (n) => n === 0, "every kept end written once the replica confirms again")
    await until(() => createEnvironment(live, "after the replica is back"), ({ status }) => status === 201, "an API write taken again")
    await hangUp(late)
    const sessions = await until(live.sessions, (all) => all.length === CALLS && all.every((s) => s.status !== "active"), `${CALLS} terminal sessions`)
    for (const session of sessions) expect(session).toMatchObject({ status: "completed", endReason: "caller_hangup" })
    await until(
      () => deliveryStates(live),
      (deliveries) => deliveries.length === CALLS && deliveries.every((d) => d.state === "delivered"),
      `${CALLS} deliveries delivered`
    )
    const events = live.endedEvents()
    expect(new Set(events.map((e) => e.sessionId))).toEqual(new Set(sessions.map((s) => s.id)))
    expect(events).toHaveLength(CALLS)

    // The replica has everything: with the primary gone, the promoted replica holds every end.
    await until(() => sentinelsSeeReplicaUp(set), (up) => up, "the sentinels seeing the replica up again")
    await set.kill(set.ports.primary)
    await until(() => createEnvironment(live, "after the failover"), ({ status }) => status === 201, "an API write taken after the failover")
    // A write can be taken before every sentinel reports the promotion: wait for the report.
    await until(async () => set.primaryPort(), (port) => port === set.ports.replica, "the sentinels naming the replica as primary")
    const afterFailover = await live.sessions()
    expect(afterFailover.map((s) => [s.id, s.status, s.endReason]).sort()).toEqual(sessions.map((s) => [s.id, s.status, s.endReason]).sort())
    expect((await deliveryStates(live)).filter((d) => d.state === "delivered")).toHaveLength(CALLS)
    expect(live.endedEvents()).toHaveLength(CALLS)
  }, 240_000)
})
