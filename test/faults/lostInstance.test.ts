import { afterEach, describe, expect, inject, it } from "vitest"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { twilioSid } from "../../sim/CallEntry.js"
import type { SimCall } from "../../sim/SimCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import type { GatewayProcess } from "../support/gatewayProcess.js"
import { ADMIN_KEY, adminAuth, uniqueId } from "../support/testApp.js"
import { type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { startFleetInstance, until } from "./faultRig.js"

/**
 * An instance dies (SIGKILL) with live calls and nothing follows the carrier's <Redirect> (as with
 * Telnyx Call Control, or a carrier that does not come back): the registry tells the survivor that
 * the instance stopped refreshing, and the survivor claims its sessions, rescues each call through
 * the carrier's REST API with the environment's fallback and delivers every session.ended.
 */

const PUBLIC_URL = "https://callgate.test"
const FALLBACK_NUMBER = "+14155550124"

describe("a dead instance's calls, rescued by a survivor through the registry", () => {
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

  it("SIGKILL one of two instances with 3 live calls: each caller transferred by the survivor, 3 sessions instance_lost, 3 session.ended", async () => {
    twilio = await startFakeTwilio()
    receiver = await startReceiver()
    const fake = twilio
    const prefix = `${uniqueId("lost")}:`
    const start = async (name: string) => {
      const gateway = await startFleetInstance({ name, prefix, redisUrl: inject("redisUrl"), publicUrl: PUBLIC_URL, twilio: fake })
      gateways.push(gateway)
      return gateway
    }
    const [doomed, survivor] = await Promise.all([start("doomed"), start("survivor")])

    const agentId = uniqueId("agent")
    const created = await fetch(`${doomed.baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({ name: "lost", webhookUrl: receiver.url("/events"), errorFallbackType: "phone", errorFallbackValue: FALLBACK_NUMBER })
    })
    expect(created.status).toBe(201)
    const environmentId: string = ((await created.json()) as any).data.id
    // Every agent on the doomed instance: placement puts every call there.
    const agent = await startSilentAgent({ gatewayUrl: doomed.baseUrl, agentId, environmentId, apiKey: ADMIN_KEY, capacity: 3 })
    agents.push(agent)
    await agent.ready(60_000)

    const placed: Array<string> = []
    for (let i = 0; i < 3; i++) {
      const callSid = twilioSid("CA")
      const call = await placeTwilioCall({
        gatewayUrl: doomed.baseUrl,
        agentId,
        environmentId,
        callSid,
        authToken: fake.authToken,
        publicUrl: PUBLIC_URL,
        streamVia: "gateway"
      })
      calls.push(call)
      placed.push(callSid)
    }
    const sessions = async () =>
      ((await (await fetch(`${survivor.baseUrl}/v1/agents/${agentId}/sessions`, { headers: adminAuth })).json()) as any).data.sessions as Array<any>
    await until(sessions, (all) => all.filter((s) => s.status === "active").length === 3, "three active sessions")

    await doomed.stop("SIGKILL")
    await Promise.all(calls.map((call) => call.closed))

    const ended = await until(sessions, (all) => all.length === 3 && all.every((s) => s.status !== "active" && s.fallback !== null), "three sessions ended and rescued by the survivor", 120_000)
    for (const session of ended) {
      expect(session).toMatchObject({
        status: "failed",
        endReason: "instance_lost",
        fallback: { trigger: "instance_lost", type: "phone", outcome: "transferred" }
      })
    }
    // Each caller was transferred to the fallback number through the carrier's REST API, once.
    for (const callSid of placed) {
      const updates = fake.callUpdates(callSid)
      expect(updates).toHaveLength(1)
      expect(JSON.stringify(updates[0]!.form)).toContain(FALLBACK_NUMBER)
    }
    const events = await until(
      () => receiver!.requests.map((r) => JSON.parse(r.body.toString("utf8"))),
      (all) => new Set(all.map((e) => e.sessionId)).size >= 3,
      "three session.ended"
    )
    expect(new Set(events.map((e) => e.sessionId))).toEqual(new Set(ended.map((s) => s.id)))
    for (const event of events) expect(event).toMatchObject({ status: "failed", endReason: "instance_lost" })
    expect(survivor.stdout()).toContain("rescued the calls of an instance that stopped refreshing")
  }, 240_000)
})
