import { spawnSync } from "node:child_process"
import { afterEach, describe, expect, inject, it } from "vitest"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { entryUrl, twilioSid, twilioSignature } from "../../sim/CallEntry.js"
import type { SimCall } from "../../sim/SimCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import type { GatewayProcess } from "../support/gatewayProcess.js"
import { freePort } from "../support/redisServer.js"
import { adminAuth, ADMIN_KEY, uniqueId } from "../support/testApp.js"
import { CA_FILE, type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { startFleetInstance, until } from "./faultRig.js"

/**
 * The fleet-wide call limit (docs/scaling.md, "Fleet-wide call limits") with two real instances
 * on one Redis: an environment with maxConcurrentCalls 5 and five live calls spread over both
 * instances refuses the sixth whichever instance takes it (the voice webhook answers the error
 * fallback, the session ends failed / concurrency_limit; POST .../calls answers 429). The second
 * instance is SIGKILLed holding its calls (two, unless a busy machine made it place one on the
 * first): their leases are never renewed again and lapse within INSTANCE_TTL, and the first
 * instance admits calls again.
 */

const INSTANCE_TTL_MS = 5000
const FALLBACK_NUMBER = "+14155550199"

describe("fleet-wide call limits with two instances", () => {
  const closers: Array<() => Promise<unknown>> = []
  afterEach(async () => {
    for (const close of closers.reverse()) await close().catch(() => {})
    closers.length = 0
  })

  it("limit 5: the sixth call is refused on either instance; a SIGKILLed instance's places come back within INSTANCE_TTL", async () => {
    const redisUrl = inject("redisUrl")
    const prefix = `${uniqueId("lim")}:`
    const twilio: FakeTwilio = await startFakeTwilio()
    closers.push(() => twilio.close())
    const receiver: Receiver = await startReceiver()
    closers.push(() => receiver.close())
    const start = async (name: string) => {
      const port = await freePort()
      const instanceId = uniqueId(name)
      const gateway = await startFleetInstance({
        name,
        instanceId,
        prefix,
        redisUrl,
        publicUrl: `http://127.0.0.1:${port}`,
        twilio,
        env: { PORT: String(port), INSTANCE_TTL: `${INSTANCE_TTL_MS}ms`, WEBHOOK_CA_FILE: CA_FILE, WEBHOOK_RETRY_SCHEDULE: "1s,1s,2s" }
      })
      closers.push(() => gateway.stop("SIGKILL"))
      return { gateway, instanceId }
    }
    const { gateway: a, instanceId: aId } = await start("a")
    const { gateway: b, instanceId: bId } = await start("b")
    const agentId = uniqueId("agent")
    const created = await fetch(`${a.baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({ name: "limited", webhookUrl: receiver.url("/events"), errorFallbackType: "phone", errorFallbackValue: FALLBACK_NUMBER })
    })
    expect(created.status).toBe(201)
    const environmentId = ((await created.json()) as { data: { id: string } }).data.id
    const patched = await fetch(`${b.baseUrl}/v1/agents/${agentId}/environments/${environmentId}`, {
      method: "PATCH",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({ maxConcurrentCalls: 5 })
    })
    expect(patched.status).toBe(200)

    // Dial-in agents on both instances, more than the limit on each.
    const agents: Array<SilentAgent> = []
    for (const gateway of [a, b]) {
      const agent = await startSilentAgent({ gatewayUrl: gateway.baseUrl, agentId, environmentId, apiKey: ADMIN_KEY, capacity: 8 })
      agents.push(agent)
      closers.push(() => agent.close())
      await agent.ready(60_000)
    }
    const calls: Array<SimCall> = []
    closers.push(() => Promise.all(calls.map((call) => call.hangup().catch(() => {}))))
    const place = async (gateway: GatewayProcess) => {
      const call = await placeTwilioCall({ gatewayUrl: gateway.baseUrl, agentId, environmentId, authToken: twilio.authToken })
      calls.push(call)
      return call
    }
    /** The voice webhook as Twilio posts it, signed; the answer's TwiML. */
    const enter = async (gateway: GatewayProcess) => {
      const url = entryUrl(gateway.baseUrl, "telephony/twilio/voice", agentId, environmentId)
      const params = { CallSid: twilioSid("CA"), AccountSid: twilioSid("AC"), From: "+15550100001", To: "+15550100002", Direction: "inbound", CallStatus: "ringing" }
      const res = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", "X-Twilio-Signature": twilioSignature(twilio.authToken, url, params) },
        body: new URLSearchParams(params).toString()
      })
      return { status: res.status, markup: await res.text(), callSid: params.CallSid }
    }
    const sessions = async () => {
      const res = await fetch(`${a.baseUrl}/v1/agents/${agentId}/sessions?limit=100`, { headers: adminAuth })
      return ((await res.json()) as { data: { sessions: Array<{ id: string; status: string; endReason: string | null; callId: string; instanceId?: string }> } }).data.sessions
    }

    // Three calls through A, two through B: five live, across the fleet.
    for (const gateway of [a, a, a, b, b]) await place(gateway)
    await until(sessions, (all) => all.filter((s) => s.status === "active").length === 5, "5 active sessions")

    // The sixth, on either instance: the error fallback answers (the phone number), the session is failed / concurrency_limit.
    for (const gateway of [a, b]) {
      const refused = await enter(gateway)
      expect(refused.status).toBe(200)
      expect(refused.markup, refused.markup).toContain(`>${FALLBACK_NUMBER}</Dial>`)
      expect(refused.markup).not.toContain("<Stream")
      const session = await until(sessions, (all) => all.some((s) => s.callId === refused.callSid), "the refused call's session")
      expect(session.find((s) => s.callId === refused.callSid)).toMatchObject({ status: "failed", endReason: "concurrency_limit" })
    }
    // An outbound call over the limit: 429, on either instance.
    for (const gateway of [a, b]) {
      const res = await fetch(`${gateway.baseUrl}/v1/agents/${agentId}/environments/${environmentId}/calls`, {
        method: "POST",
        headers: { ...adminAuth, "content-type": "application/json" },
        body: JSON.stringify({ to: "+15550100003", from: "+15550100004" })
      })
      expect(res.status).toBe(429)
      expect(((await res.json()) as { error: { message: string } }).error.message).toContain("maxConcurrentCalls")
    }
    expect(twilio.createdCalls().length).toBe(0)

    // B dies holding its calls. The entry places a call on another instance when its own hold on
    // calls runs short (a busy machine can delay B's registry refresh), so which instance carries
    // each call is read from the sessions, not assumed from where it entered.
    const live = (await sessions()).filter((s) => s.status === "active")
    const heldByA = live.filter((s) => s.instanceId === aId).length
    const heldByB = live.filter((s) => s.instanceId === bId).length
    expect(heldByB, "B carries a call").toBeGreaterThan(0)
    expect(heldByA + heldByB).toBe(5)
    // Its leases were renewed at most INSTANCE_TTL ahead (Redis time), never again.
    const leaseKey = `${prefix}leases:{${agentId}:${environmentId}}:calls`
    await b.stop("SIGKILL")
    const redisPort = new URL(redisUrl).port
    const scores = spawnSync("redis-cli", ["-p", redisPort, "zrange", leaseKey, "0", "-1", "WITHSCORES"], { encoding: "utf8" }).stdout.trim().split("\n")
    const redisTime = () => {
      const [seconds, micros] = spawnSync("redis-cli", ["-p", redisPort, "time"], { encoding: "utf8" }).stdout.trim().split("\n").map(Number)
      return seconds! * 1000 + Math.floor(micros! / 1000)
    }
    const redisNow = redisTime()
    const expiries = scores.filter((_, i) => i % 2 === 1).map(Number)
    expect(expiries).toHaveLength(5)
    for (const expiry of expiries) expect(expiry - redisNow).toBeLessThanOrEqual(INSTANCE_TTL_MS)

    // Once B's leases have lapsed (each was renewed at its own moment, so they lapse one after the
    // other), A admits as many more calls as B carried, and refuses the one after. A's own leases
    // were renewed since, so they hold.
    // (What is waited on: the leases still in force in Redis time. A renewal B had already sent when
    // it was killed may still land after the read above, so the expiries read then are not waited on.)
    const inForce = () => Number(spawnSync("redis-cli", ["-p", redisPort, "zcount", leaseKey, `(${redisTime()}`, "+inf"], { encoding: "utf8" }).stdout.trim())
    await until(async () => inForce(), (held) => held <= heldByA, `B's leases lapsed in Redis time (A's ${heldByA} still held)`, 120_000)
    for (let i = 0; i < heldByB; i++) expect((await enter(a)).markup).toContain("<Stream")
    expect((await enter(a)).markup).toContain(`>${FALLBACK_NUMBER}</Dial>`)
    // Every refused call's session.ended was sent, with its reason.
    await until(
      () => receiver.requests.map((r) => JSON.parse(r.body.toString("utf8"))).filter((e) => e.endReason === "concurrency_limit").length,
      (n) => n >= 3,
      "session.ended of the refused calls"
    )
  }, 180_000)
})
