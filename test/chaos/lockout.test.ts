import { afterEach, describe, expect, it } from "vitest"
import { entryUrl, twilioSid } from "../../sim/CallEntry.js"
import { EntryPaths } from "../../src/kernel/EntryPaths.js"
import { type RedisServer, startRedisServer } from "../support/redisServer.js"
import { framesLost, type Rig, startRig, until } from "../faults/faultRig.js"

/**
 * Someone else's failures from a shared address (Twilio's webhooks and streams come from a shared
 * pool): 40 badly signed voice webhooks from one address, then real calls from the same address.
 * The bad ones are throttled past AUTH_FAILURES_PER_MINUTE (30: 401, then 429); the signed
 * webhooks, their media streams, the agent's key and the admin API from that address are answered
 * normally, and the calls run end to end.
 */
describe("failed authentications never lock out valid ones from the same address", () => {
  let redis: RedisServer | undefined
  let rig: Rig | undefined

  afterEach(async () => {
    await rig?.close()
    await redis?.stop()
    rig = redis = undefined
  })

  it("40 bad signatures (30 x 401, then 429), then 4 valid calls from the same address: 4/4 connected, 0 frames lost, 4/4 session.ended once, 0 active", async () => {
    redis = await startRedisServer()
    rig = await startRig(redis.url)
    const live = rig
    const forged = async () => {
      const form = new URLSearchParams({ CallSid: twilioSid("CA"), AccountSid: twilioSid("AC"), From: "+15550001111", To: "+15550002222" })
      const res = await fetch(entryUrl(live.gateway.baseUrl, EntryPaths.twilioVoice, live.agentId, live.environmentId), {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": "Zm9yZ2VkLXNpZ25hdHVyZQ==" },
        body: form.toString()
      })
      await res.arrayBuffer()
      return res.status
    }
    const statuses: Array<number> = []
    for (let n = 0; n < 40; n++) statuses.push(await forged())
    expect(statuses.filter((s) => s === 401)).toHaveLength(30)
    expect(statuses.filter((s) => s === 429)).toHaveLength(10)

    // The same address: an agent with a valid key, four signed voice webhooks and their streams.
    const calls = await live.placeCalls(4)
    const sessions = await until(live.sessions, (all) => all.filter((s) => s.status === "active").length === 4, "4 active sessions")
    expect(sessions).toHaveLength(4)
    // Bad ones from there are still throttled meanwhile.
    expect(await forged()).toBe(429)

    await Promise.all(calls.map(({ call }) => call.hangup()))
    const ended = await until(live.sessions, (all) => all.length === 4 && all.every((s) => s.status !== "active"), "4 terminal sessions")
    for (const session of ended) expect(session).toMatchObject({ status: "completed", endReason: "caller_hangup" })
    const events = await until(live.endedEvents, (events) => events.length >= 4, "4 session.ended")
    expect(new Set(events.map((e) => e.sessionId))).toEqual(new Set(ended.map((s) => s.id)))
    expect(live.endedEvents()).toHaveLength(4)
    for (const { index, call } of calls) expect(framesLost(live.received.get(index), call.stats.framesSent)).toBe(0)
    for (const { callSid } of calls) expect(live.twilio.callUpdates(callSid)).toEqual([])
  })
})
