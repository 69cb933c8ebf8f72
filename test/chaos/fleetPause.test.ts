import { afterEach, describe, expect, inject, it } from "vitest"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { twilioSid } from "../../sim/CallEntry.js"
import type { SimCall } from "../../sim/SimCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import type { GatewayProcess } from "../support/gatewayProcess.js"
import { ADMIN_KEY, adminAuth, uniqueId } from "../support/testApp.js"
import { type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { framesLost, LONG, recordCallerStamps, sleep, startFleetInstance, until } from "../faults/faultRig.js"

/**
 * A paused instance in a two-instance fleet (INSTANCE_TTL 10 s), every call on it. Paused past
 * the TTL (20 s), it counts as lost: the survivor claims its sessions and rescues each caller
 * through the carrier, once; when the paused one resumes it finds its sessions claimed and stops
 * serving them at once (no second rescue, no second ending), saying so in one line. Paused less
 * than the TTL (7 s, with --long), it is not lost: nothing is rescued and no frame is lost.
 */

const PUBLIC_URL = "https://callgate.test"
const FALLBACK_NUMBER = "+14155550124"
const CALLS = 4

describe("a paused instance in a two-instance fleet (SIGSTOP / SIGCONT, INSTANCE_TTL 10 s)", () => {
  let twilio: FakeTwilio | undefined
  let receiver: Receiver | undefined
  const gateways: Array<GatewayProcess> = []
  const agents: Array<SilentAgent> = []
  const calls: Array<SimCall> = []

  afterEach(async () => {
    await Promise.all(calls.splice(0).map((call) => call.hangup()))
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    await Promise.all(gateways.splice(0).map((gateway) => gateway.stop("SIGKILL")))
    await twilio?.close()
    await receiver?.close()
    twilio = receiver = undefined
  })

  const setUp = async () => {
    twilio = await startFakeTwilio()
    receiver = await startReceiver()
    const fake = twilio
    const prefix = `${uniqueId("pause")}:`
    const start = async (name: string) => {
      const gateway = await startFleetInstance({ name, prefix, redisUrl: inject("redisUrl"), publicUrl: PUBLIC_URL, twilio: fake, env: { INSTANCE_TTL: "10s" } })
      gateways.push(gateway)
      return gateway
    }
    const [paused, survivor] = await Promise.all([start("paused"), start("survivor")])
    const agentId = uniqueId("agent")
    const created = await fetch(`${paused.baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({ name: "paused", webhookUrl: receiver.url("/events"), errorFallbackType: "phone", errorFallbackValue: FALLBACK_NUMBER })
    })
    expect(created.status).toBe(201)
    const environmentId: string = ((await created.json()) as any).data.id
    // Every agent on the paused instance: placement puts every call there.
    const agent = await startSilentAgent({ gatewayUrl: paused.baseUrl, agentId, environmentId, apiKey: ADMIN_KEY, capacity: CALLS })
    agents.push(agent)
    const received = new Map<number, Array<number>>()
    recordCallerStamps(agent, received)
    await agent.ready(60_000)
    const placed: Array<{ callSid: string; call: SimCall; index: number }> = []
    for (let index = 1; index <= CALLS; index++) {
      const callSid = twilioSid("CA")
      const call = await placeTwilioCall({
        gatewayUrl: paused.baseUrl,
        agentId,
        environmentId,
        callSid,
        authToken: fake.authToken,
        publicUrl: PUBLIC_URL,
        streamVia: "gateway",
        stampCallId: index
      })
      calls.push(call)
      placed.push({ callSid, call, index })
    }
    const sessions = async () =>
      ((await (await fetch(`${survivor.baseUrl}/v1/agents/${agentId}/sessions`, { headers: adminAuth })).json()) as any).data.sessions as Array<any>
    await until(sessions, (all) => all.filter((s) => s.status === "active").length === CALLS, `${CALLS} active sessions`)
    await until(() => received.size, (n) => n === CALLS, "caller audio at the agent on every call")
    const events = () => receiver!.requests.map((r) => JSON.parse(r.body.toString("utf8"))).filter((e) => e.event === "session.ended")
    return { fake, paused, survivor, placed, sessions, received, events }
  }

  it(`paused 20 s with ${CALLS} live calls: each caller rescued once (1 REST update per call), the resumed instance stops serving them in one line, ${CALLS}/${CALLS} session.ended once, 0 active`, async () => {
    const { fake, paused, survivor, placed, sessions, events } = await setUp()
    paused.child.kill("SIGSTOP")
    const ended = await until(sessions, (all) => all.length === CALLS && all.every((s) => s.status !== "active" && s.fallback !== null), "every session claimed and rescued by the survivor", 120_000)
    for (const session of ended) {
      expect(session).toMatchObject({ status: "failed", endReason: "instance_lost", fallback: { trigger: "instance_lost", type: "phone", outcome: "transferred" } })
    }
    await sleep(Math.max(0, 20_000))
    paused.child.kill("SIGCONT")
    const said = await until(
      () => paused.stdout().split("\n").filter((line) => line.includes("claimed by another instance")),
      (lines) => lines.length > 0,
      "the resumed instance letting go of the claimed calls"
    )
    // Its legs are closed: every caller's stream ends.
    await Promise.all(placed.map(({ call }) => call.closed))
    expect(said).toHaveLength(1)
    expect(said[0]).toContain(`${CALLS} live calls`)
    // One REST rescue per call, the survivor's, whoever else tried.
    for (const { callSid } of placed) {
      const updates = fake.callUpdates(callSid)
      expect({ callSid, updates: updates.length }).toEqual({ callSid, updates: 1 })
      expect(JSON.stringify(updates[0]!.form)).toContain(FALLBACK_NUMBER)
    }
    const delivered = await until(events, (all) => new Set(all.map((e) => e.sessionId)).size >= CALLS, `${CALLS} session.ended`)
    expect(new Set(delivered.map((e) => e.sessionId))).toEqual(new Set(ended.map((s) => s.id)))
    expect(delivered).toHaveLength(CALLS)
    for (const event of delivered) expect(event).toMatchObject({ status: "failed", endReason: "instance_lost" })
    const after = await sessions()
    expect(after.filter((s) => s.status === "active")).toHaveLength(0)
    expect(after.every((s) => s.endReason === "instance_lost")).toBe(true)
    expect(survivor.stdout()).toContain("rescued the calls of an instance that stopped refreshing")
    expect(paused.stdout()).not.toContain("message rate limit exceeded")
  }, 300_000)

  if (LONG)
    it(`paused 7 s with ${CALLS} live calls (less than INSTANCE_TTL): nothing rescued, 0 frames lost, ${CALLS}/${CALLS} session.ended once`, async () => {
      const { fake, paused, placed, sessions, received, events } = await setUp()
      paused.child.kill("SIGSTOP")
      await sleep(7_000)
      paused.child.kill("SIGCONT")
      await sleep(3_000)
      for (const { call } of placed) expect(call.isOpen).toBe(true)
      await Promise.all(placed.map(({ call }) => call.hangup()))
      const ended = await until(sessions, (all) => all.length === CALLS && all.every((s) => s.status !== "active"), `${CALLS} terminal sessions`)
      for (const session of ended) expect(session).toMatchObject({ status: "completed", endReason: "caller_hangup" })
      for (const { callSid } of placed) expect(fake.callUpdates(callSid)).toEqual([])
      for (const { index, call } of placed) expect(framesLost(received.get(index), call.stats.framesSent)).toBe(0)
      expect(await until(events, (all) => all.length >= CALLS, `${CALLS} session.ended`)).toHaveLength(CALLS)
    }, 300_000)
})
