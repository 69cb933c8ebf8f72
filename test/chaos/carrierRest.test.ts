import { afterEach, describe, expect, it } from "vitest"
import { startSilentAgent } from "../../examples/agents/silent-agent.js"
import type { AgentCall } from "../../examples/agents/agent-runtime.js"
import { twilioSid } from "../../sim/CallEntry.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type RedisServer, startRedisServer } from "../support/redisServer.js"
import { ADMIN_KEY, adminAuth } from "../support/testApp.js"
import { type Rig, startRig, until } from "../faults/faultRig.js"

/**
 * The carrier's REST API fails the rescue: it answers 500, or hangs past CARRIER_REQUEST_TIMEOUT
 * (5 s). The transfer is not lost: the stream is ended, Twilio goes on to the entry answer's
 * `<Redirect>`, and its answer is the fallback's `<Dial>`. The rescue is recorded once, `via:
 * redirect`; one REST attempt, one session.ended, nothing left active.
 */

const FALLBACK_NUMBER = "+14155550199"

describe("carrier REST failing the rescue: the <Redirect> carries it", () => {
  let redis: RedisServer | undefined
  let rig: Rig | undefined

  afterEach(async () => {
    await rig?.close()
    await redis?.stop()
    rig = redis = undefined
  })

  it.each([
    ["answering 500", { status: 500 }],
    ["hanging past CARRIER_REQUEST_TIMEOUT", { delayMs: 30_000 }]
  ] as const)("REST %s: the caller gets the fallback's <Dial> through the <Redirect>, rescued once (via redirect), 1 session.ended, 0 active", async (label, failure) => {
    redis = await startRedisServer()
    rig = await startRig(redis.url)
    const live = rig
    const patched = await fetch(`${live.gateway.baseUrl}/v1/agents/${live.agentId}/environments/${live.environmentId}`, {
      method: "PATCH",
      headers: { ...adminAuth, "content-type": "application/json" },
      // No agent failover: the agent's error is to be rescued, through the carrier (the agent process
      // would otherwise take its own call back on its next idle socket).
      body: JSON.stringify({ errorFallbackType: "phone", errorFallbackValue: FALLBACK_NUMBER, agentFailoverTimeout: 0 })
    })
    expect(patched.status).toBe(200)
    const agent = await startSilentAgent({ gatewayUrl: live.gateway.baseUrl, agentId: live.agentId, environmentId: live.environmentId, apiKey: ADMIN_KEY, capacity: 1 })
    await agent.ready(60_000)
    let agentCall: AgentCall | undefined
    agent.on("callerMedia", (_audio, _at, call) => void (agentCall ??= call))
    const callSid = twilioSid("CA")
    const call = await placeTwilioCall({
      gatewayUrl: live.gateway.baseUrl,
      agentId: live.agentId,
      environmentId: live.environmentId,
      callSid,
      authToken: live.twilio.authToken,
      followRedirect: true
    })
    await until(() => agentCall !== undefined, Boolean, "the agent hearing the caller")
    // The carrier's REST API fails the next request (the rescue's transfer); the agent fails the call.
    live.twilio.failNext(failure)
    const failedAt = Date.now()
    agentCall!.error("the agent crashed")
    const answer = await call.redirected!
    expect(answer).toBeDefined()
    expect(answer!.markup).toMatch(new RegExp(`<Dial[^>]*>\\${FALLBACK_NUMBER}</Dial>`))
    console.log(`carrier REST ${label}: the caller's <Dial> through the <Redirect> ${answer!.answeredAt - failedAt} ms after the agent's error`)

    const sessions = await until(live.sessions, (all) => all.length === 1 && all[0]!.status !== "active", "the session ended")
    expect(sessions[0]).toMatchObject({ status: "failed", fallback: { type: "phone", outcome: "transferred", via: "redirect" } })
    // One REST attempt (the failed one), and the rescue once, through the redirect.
    expect(live.twilio.callUpdates(callSid)).toHaveLength(1)
    const events = await until(live.endedEvents, (all) => all.length >= 1, "session.ended")
    expect(events).toHaveLength(1)
    expect(live.gateway.stdout().split("\n").filter((line) => line.includes('"msg":"error fallback ran"'))).toHaveLength(1)
    await agent.close()
  }, 180_000)
})
