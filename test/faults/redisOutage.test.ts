import { existsSync } from "node:fs"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { type RestartableRedis, startRestartableRedis } from "../support/redisServer.js"
import { framesLost, LONG, type LiveCall, type Rig, sleep, startRig, until } from "./faultRig.js"

/**
 * Redis goes away with live calls, half of which end while it is away. Audio keeps flowing both
 * ways (caller and agent frames are stamped: a lost one is a gap); the ends the store cannot take
 * are kept in memory and retried until it answers; once it is back every session is terminal and
 * every session.ended delivered. Stopped (SIGTERM) while Redis is away, the
 * instance spools the kept ends to DATA_DIR and replays them at the next start.
 *
 * CI runs a 15 s outage; `npm run test:faults -- --long` adds 2 and 10 minutes.
 */

const PASSWORD = "outage-secret-pw"

const backlog = async (rig: Rig) => {
  const text = await (await fetch(`${rig.gateway.baseUrl}/metrics`)).text()
  const match = /^callgate_session_end_backlog (\d+)/m.exec(text)
  return match === null ? -1 : Number(match[1])
}

const hangUp = (calls: ReadonlyArray<LiveCall>) => Promise.all(calls.map(({ call }) => call.hangup()))

const outages: ReadonlyArray<readonly [string, number]> = LONG
  ? [
      ["15 s", 15_000],
      ["2 min", 120_000],
      ["10 min", 600_000]
    ]
  : [["15 s", 15_000]]

describe("Redis outages with live calls", () => {
  let redis: RestartableRedis | undefined
  let rig: Rig | undefined

  afterEach(async () => {
    await rig?.close()
    await redis?.stop()
    rig = redis = undefined
  })

  it.each(outages)(
    "a %s outage, 20 live calls, 10 ending while Redis is away: 0 frames lost both ways, 20/20 terminal, 20/20 session.ended",
    async (_label, outageMs) => {
      redis = await startRestartableRedis({ password: PASSWORD })
      rig = await startRig(redis.url)
      const live = rig
      const calls = await live.placeCalls(20)
      await until(live.sessions, (sessions) => sessions.filter((s) => s.status === "active").length === 20, "20 active sessions")
      const early = calls.slice(0, 10)
      const late = calls.slice(10)

      const agentFramesAtDown = new Map(late.map(({ index }) => [index, live.receivedByCaller.get(index)!.length]))
      await redis.down()
      const downAt = Date.now()
      await hangUp(early)
      // Kept: the store did not take them, and the instance said so once, naming the store without its password.
      await until(() => backlog(live), (n) => n === 10, "10 session ends kept", outageMs)
      const said = live.gateway.stdout().split("\n").filter((line) => line.includes("is unreachable: session ends are kept"))
      expect(said).toHaveLength(1)
      expect(said[0]).toContain(`redis://127.0.0.1:${redis.port}`)
      expect(live.gateway.stdout()).not.toContain(PASSWORD)
      await sleep(Math.max(0, outageMs - (Date.now() - downAt)))
      // The late calls are still live, the agent's audio still reaches them, and nothing was sent
      // for the early ones while Redis was away.
      for (const { call } of late) expect(call.isOpen).toBe(true)
      for (const { index } of late) expect(live.receivedByCaller.get(index)!.length).toBeGreaterThan(agentFramesAtDown.get(index)!)
      expect(live.endedEvents()).toHaveLength(0)
      await redis.up()

      await until(() => backlog(live), (n) => n === 0, "the backlog written once Redis is back")
      await hangUp(late)
      const sessions = await until(live.sessions, (all) => all.length === 20 && all.every((s) => s.status !== "active"), "20 terminal sessions")
      for (const session of sessions) expect(session).toMatchObject({ status: "completed", endReason: "caller_hangup" })
      const events = await until(live.endedEvents, (events) => events.length >= 20, "20 session.ended")
      expect(new Set(events.map((e) => e.sessionId))).toEqual(new Set(sessions.map((s) => s.id)))
      expect(live.endedEvents()).toHaveLength(20)

      // Not one frame lost on any call, either way, across the outage.
      for (const { index, call } of calls) expect(framesLost(live.received.get(index), call.stats.framesSent)).toBe(0)
      for (const { index } of calls) {
        const seqs = live.receivedByCaller.get(index)!
        expect({ call: index, agentFramesLost: framesLost(seqs, Math.max(...seqs)) }).toEqual({ call: index, agentFramesLost: 0 })
      }
      expect(live.gateway.stdout()).toContain("answers again")
    },
    LONG ? 900_000 : 240_000
  )

  it(`SIGTERM during ${LONG ? "a 2 min" : "an"} outage, restart once Redis is back: the spool replays, 10/10 terminal, 10/10 session.ended`, async () => {
    redis = await startRestartableRedis()
    rig = await startRig(redis.url)
    const live = rig
    const calls = await live.placeCalls(10)
    await until(live.sessions, (sessions) => sessions.filter((s) => s.status === "active").length === 10, "10 active sessions")
    const early = calls.slice(0, 5)

    await redis.down()
    const downAt = Date.now()
    await hangUp(early)
    await until(() => backlog(live), (n) => n === 5, "5 session ends kept")
    // The stop drains for SHUTDOWN_DRAIN_TIMEOUT, then cuts the other five (rescued: a REST hang-up each).
    const exit = await live.gateway.stop("SIGTERM", 60_000)
    expect(exit).toEqual({ code: 0, signal: null })
    expect(live.gateway.stdout()).toContain("10 session ends the store at")
    const dataDir = live.gateway.env.DATA_DIR!
    const spool = join(dataDir, `session-ends.${live.gateway.env.INSTANCE_ID}.json`)
    expect(existsSync(spool)).toBe(true)
    for (const { callSid } of calls.slice(5)) expect(live.twilio.callUpdates(callSid).map((r) => r.form)).toEqual([{ Status: "completed" }])

    if (LONG) await sleep(Math.max(0, 120_000 - (Date.now() - downAt)))
    await redis.up()
    await live.restart()
    const sessions = await until(live.sessions, (all) => all.length === 10 && all.every((s) => s.status !== "active"), "10 terminal sessions")
    const byCall = new Map(sessions.map((s) => [s.callId, s]))
    for (const { callSid } of early) expect(byCall.get(callSid)).toMatchObject({ status: "completed", endReason: "caller_hangup" })
    for (const { callSid } of calls.slice(5)) expect(byCall.get(callSid)).toMatchObject({ status: "failed", endReason: "shutdown" })
    const events = await until(live.endedEvents, (events) => events.length >= 10, "10 session.ended")
    expect(new Set(events.map((e) => e.sessionId))).toEqual(new Set(sessions.map((s) => s.id)))
    expect(live.endedEvents()).toHaveLength(10)
    expect(live.gateway.stdout()).toContain("replaying 10 session ends spooled at the last stop")
    await until(() => existsSync(spool), (exists) => !exists, "the spool removed once replayed")
  }, LONG ? 600_000 : 240_000)
})
