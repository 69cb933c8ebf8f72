import { afterEach, describe, expect, it } from "vitest"
import { type RedisCluster, startRedisCluster } from "../support/redisCluster.js"
import { type RedisSentinelSet, startRedisSentinelSet } from "../support/redisSentinel.js"
import { adminAuth } from "../support/testApp.js"
import { LONG, type LiveCall, type Rig, startRig, until } from "./faultRig.js"

/**
 * Redis fails over with live calls (docs/scaling.md, "What a failover costs a live call"): the
 * primary is SIGKILLed while 20 calls are live and session.ended deliveries are in flight (the
 * receiver holds each first attempt for 1.5 s). Calls end before, during and after the failover.
 * Every session must end, every session.ended arrive exactly once, and the calls still live
 * across the failover keep their audio. Through Sentinel (primary, replica, three sentinels) and on
 * a Redis Cluster of three primaries with a replica each. Writes whose loss loses data wait for the
 * replica (REDIS_WAIT_REPLICAS=auto), so what the primary acknowledged is on the replica it
 * fails over to.
 *
 * CI runs 20 calls; `npm run test:faults -- --long` runs 60.
 */

const CALLS = LONG ? 60 : 20

const hangUp = (calls: ReadonlyArray<LiveCall>) => Promise.all(calls.map(({ call }) => call.hangup()))

/** Answers 200 after 1.5 s on a delivery's first attempt, so deliveries are in flight when the primary dies. */
const slowFirstAttempt = (request: { headers: Record<string, string | Array<string> | undefined> }) =>
  request.headers["x-service-attempt"] === "1" ? { status: 200, delayMs: 1500 } : { status: 200 }

const environmentPath = (rig: Rig) => `${rig.gateway.baseUrl}/v1/agents/${rig.agentId}/environments/${rig.environmentId}`

/**
 * An API write: creating an environment writes its record and the agent's environment index,
 * which shares the hash tag {agentId} with the agent's sessions (in a Cluster: the primary killed
 * below). 201 once callgate writes to that primary again.
 */
const createEnvironment = async (rig: Rig, name: string) =>
  (
    await fetch(`${rig.gateway.baseUrl}/v1/agents/${rig.agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({ name })
    })
  ).status

const deliveryStates = async (rig: Rig) => {
  const res = await fetch(`${environmentPath(rig)}/webhook-deliveries?limit=100`, { headers: adminAuth })
  if (res.status !== 200) return []
  return ((await res.json()) as { data: { deliveries: Array<{ state: string; sessionId: string }> } }).data.deliveries
}

/**
 * The scenario on a rig whose store `killPrimary` SIGKILLs. Returns the time from the primary's
 * death to callgate's first API write that the store took.
 */
const failoverWithLiveCalls = async (rig: Rig, killPrimary: () => Promise<void>) => {
  const calls = await rig.placeCalls(CALLS)
  await until(rig.sessions, (sessions) => sessions.filter((s) => s.status === "active").length === CALLS, `${CALLS} active sessions`)
  const quarter = Math.floor(CALLS / 4)
  const before = calls.slice(0, quarter)
  const during = calls.slice(quarter, quarter * 3)
  const after = calls.slice(quarter * 3)

  // Ended before: their session.ended deliveries are in flight (held 1.5 s by the receiver) when the primary dies.
  await hangUp(before)
  await until(() => rig.receiver.inFlight(), (n) => n > 0, "a session.ended delivery in flight")
  const agentFramesAtKill = new Map(after.map(({ index }) => [index, rig.receivedByCaller.get(index)!.length]))
  await killPrimary()
  const diedAt = Date.now()
  // Ended over the failover: the store may refuse their ends for a while; the journal keeps them.
  await hangUp(during)
  let attempt = 0
  await until(() => createEnvironment(rig, `after failover ${attempt++}`), (status) => status === 201, "an API write taken after the failover", 120_000).catch((e) => {
    console.log(rig.gateway.stdout().slice(-6000), rig.gateway.stderr().slice(-3000))
    throw e
  })
  const writingAgainMs = Date.now() - diedAt

  // The calls live across the failover are still up and still hear their agent.
  for (const { call } of after) expect(call.isOpen).toBe(true)
  await until(
    () => after.filter(({ index }) => rig.receivedByCaller.get(index)!.length > agentFramesAtKill.get(index)!).length,
    (n) => n === after.length,
    "agent audio on every call live across the failover"
  )
  await hangUp(after)

  const sessions = await until(rig.sessions, (all) => all.length === CALLS && all.every((s) => s.status !== "active"), `${CALLS} terminal sessions`)
  for (const session of sessions) expect(session).toMatchObject({ status: "completed", endReason: "caller_hangup" })
  // Every delivery settled as delivered in the store: none can be sent again, so the count is final.
  await until(
    () => deliveryStates(rig),
    (deliveries) => deliveries.length === CALLS && deliveries.every((d) => d.state === "delivered"),
    `${CALLS} deliveries delivered`,
    90_000
  )
  const events = rig.endedEvents()
  expect(new Set(events.map((e) => e.sessionId))).toEqual(new Set(sessions.map((s) => s.id)))
  expect(events).toHaveLength(CALLS)
  return writingAgainMs
}

describe("Redis failover with live calls", () => {
  let sentinel: RedisSentinelSet | undefined
  let cluster: RedisCluster | undefined
  let rig: Rig | undefined

  afterEach(async () => {
    await rig?.close()
    await sentinel?.stop()
    await cluster?.stop()
    rig = sentinel = cluster = undefined
  })

  it(`Sentinel: the primary SIGKILLed with ${CALLS} live calls: all terminal, every session.ended once, no live call lost`, async () => {
    sentinel = await startRedisSentinelSet()
    const set = sentinel
    rig = await startRig("", set.env, { reply: slowFirstAttempt })
    const oldPrimary = set.ports.primary
    const writingAgainMs = await failoverWithLiveCalls(rig, () => set.kill(oldPrimary))
    // The sentinels promoted the replica, and callgate said it follows it, never showing a password.
    expect(set.primaryPort()).toBe(set.ports.replica)
    const out = rig.gateway.stdout()
    expect(out).toMatch(new RegExp(`store (primary is now|reachable again).*127\\.0\\.0\\.1:${set.ports.replica}`))
    expect(out).not.toContain(set.password)
    expect(out).not.toContain(set.sentinelPassword)
    expect((await fetch(`${rig.gateway.baseUrl}/readyz`)).status).toBe(200)
    console.log(`Sentinel failover: callgate wrote again ${writingAgainMs} ms after the primary's death`)
  }, 360_000)

  it(`Cluster (3 primaries, 3 replicas): the sessions' primary SIGKILLed with ${CALLS} live calls: all terminal, every session.ended once`, async () => {
    cluster = await startRedisCluster(3, 1)
    const running = cluster
    rig = await startRig("", { REDIS_CLUSTER_NODES: running.nodes }, { reply: slowFirstAttempt })
    const live = rig
    // The primary holding the agent's sessions (every session key carries the tag {agentId}).
    const prefix = live.gateway.env.REDIS_KEY_PREFIX!
    const target = running.primaryFor(`${prefix}session:{${live.agentId}}:x`)!
    expect(target).toBeDefined()
    const writingAgainMs = await failoverWithLiveCalls(live, () => running.kill(target))
    expect(running.primaryFor(`${prefix}session:{${live.agentId}}:x`)).not.toBe(target)
    expect((await fetch(`${live.gateway.baseUrl}/readyz`)).status).toBe(200)
    console.log(`Cluster failover: callgate wrote again ${writingAgainMs} ms after the primary's death`)
  }, 240_000)
})
