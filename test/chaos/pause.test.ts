import { afterEach, describe, expect, it } from "vitest"
import { type RedisServer, startRedisServer } from "../support/redisServer.js"
import { framesLost, type LiveCall, LONG, type Rig, sleep, startRig, until } from "../faults/faultRig.js"

/**
 * A paused process (a long GC, CPU throttling, `kill -STOP`/`kill -CONT`) with live calls on a
 * single instance: the frames both peers sent meanwhile sit in the kernel and arrive at once on
 * resume. None of it may read as a flood (the per-socket rate limit measures the peer's rate over
 * time this process was reading): every call lives on, not a frame is lost, nothing is rescued,
 * each session ends once. CI pauses 7 s; `npm run test:chaos -- --long` adds 20 s and 30 s.
 */

const pauses: ReadonlyArray<readonly [string, number]> = LONG
  ? [
      ["7 s", 7_000],
      ["20 s", 20_000],
      ["30 s", 30_000]
    ]
  : [["7 s", 7_000]]

const hangUp = (calls: ReadonlyArray<LiveCall>) => Promise.all(calls.map(({ call }) => call.hangup()))

describe("a paused instance with live calls (SIGSTOP / SIGCONT)", () => {
  let redis: RedisServer | undefined
  let rig: Rig | undefined

  afterEach(async () => {
    await rig?.close()
    await redis?.stop()
    rig = redis = undefined
  })

  it.each(pauses)(
    "paused %s with 4 live calls: 4/4 live after, 0 frames lost both ways, 0 rescued, 4/4 session.ended once, 0 active",
    async (_label, pauseMs) => {
      redis = await startRedisServer()
      rig = await startRig(redis.url)
      const live = rig
      const calls = await live.placeCalls(4)
      await until(live.sessions, (sessions) => sessions.filter((s) => s.status === "active").length === 4, "4 active sessions")
      // A second of steady audio first, then the pause.
      await sleep(1_000)
      live.gateway.child.kill("SIGSTOP")
      await sleep(pauseMs)
      live.gateway.child.kill("SIGCONT")
      const before = new Map(calls.map(({ index }) => [index, live.receivedByCaller.get(index)!.length]))
      // After the resume the agent's audio reaches every caller again, live.
      await until(
        () => calls.filter(({ index }) => live.receivedByCaller.get(index)!.length > before.get(index)! + 100).length,
        (n) => n === 4,
        "agent audio at every caller after the resume"
      )
      for (const { call } of calls) expect(call.isOpen).toBe(true)
      await hangUp(calls)
      const sessions = await until(live.sessions, (all) => all.length === 4 && all.every((s) => s.status !== "active"), "4 terminal sessions")
      for (const session of sessions) expect(session).toMatchObject({ status: "completed", endReason: "caller_hangup" })
      const events = await until(live.endedEvents, (events) => events.length >= 4, "4 session.ended")
      expect(new Set(events.map((e) => e.sessionId))).toEqual(new Set(sessions.map((s) => s.id)))
      expect(live.endedEvents()).toHaveLength(4)
      // Nothing was rescued (no REST update), nothing cut by a limit, not one frame lost either way.
      for (const { callSid } of calls) expect(live.twilio.callUpdates(callSid)).toEqual([])
      for (const { index, call } of calls) expect({ call: index, lost: framesLost(live.received.get(index), call.stats.framesSent) }).toEqual({ call: index, lost: 0 })
      for (const { index } of calls) {
        const seqs = live.receivedByCaller.get(index)!
        expect({ call: index, agentFramesLost: framesLost(seqs, Math.max(...seqs)) }).toEqual({ call: index, agentFramesLost: 0 })
      }
      expect(live.gateway.stdout()).not.toContain("message rate limit exceeded")
    },
    LONG ? 300_000 : 180_000
  )
})
