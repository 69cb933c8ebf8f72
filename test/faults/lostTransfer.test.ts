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
 * The instance that made a transfer dies and the carrier's report of its outcome is lost with it
 * (docs/fallback.md, "When the outcome never comes"): the session, ended with its transfer pending,
 * is still owned by the dead instance in the store; the survivor's reconciliation of that instance
 * watches the transfer and closes it `failed` (carrierStatus null) at TRANSFER_RING_TIMEOUT + 10 s
 * after it began, with the session's one session.ended.
 */

const PUBLIC_URL = "https://callgate.test"
const FALLBACK_NUMBER = "+14155550125"

describe("a transfer whose instance and outcome report are both lost", () => {
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

  it("SIGKILL the instance while its phone fallback's transfer rings: the survivor closes the transfer failed at its bound, one session.ended", async () => {
    twilio = await startFakeTwilio()
    receiver = await startReceiver()
    const fake = twilio
    const prefix = `${uniqueId("lostxfer")}:`
    // The shortest ring timeout the carriers take: the transfer's bound is 5 + 10 s after it began.
    const start = (name: string) =>
      startFleetInstance({ name, prefix, redisUrl: inject("redisUrl"), publicUrl: PUBLIC_URL, twilio: fake, env: { TRANSFER_RING_TIMEOUT: "5s" } }).then(
        (gateway) => (gateways.push(gateway), gateway)
      )
    const [doomed, survivor] = await Promise.all([start("doomed"), start("survivor")])

    const agentId = uniqueId("agent")
    const created = await fetch(`${doomed.baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({
        name: "lost transfer",
        webhookUrl: receiver.url("/events"),
        errorFallbackType: "phone",
        errorFallbackValue: FALLBACK_NUMBER,
        // No failover: the agent's loss goes straight to the phone fallback.
        agentFailoverTimeout: 0
      })
    })
    expect(created.status).toBe(201)
    const environmentId: string = ((await created.json()) as any).data.id
    const agent = await startSilentAgent({ gatewayUrl: doomed.baseUrl, agentId, environmentId, apiKey: ADMIN_KEY, capacity: 1 })
    agents.push(agent)
    await agent.ready(60_000)

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
    const sessions = async () =>
      ((await (await fetch(`${survivor.baseUrl}/v1/agents/${agentId}/sessions`, { headers: adminAuth })).json()) as any).data.sessions as Array<any>
    await until(sessions, (all) => all.length === 1 && all[0].status === "active", "the active session")

    // The agent goes away: the doomed instance transfers the caller with the tracked <Dial> and ends the session, the transfer pending.
    await agent.close()
    const [pending] = await until(sessions, (all) => all[0]?.status === "failed" && all[0]?.pendingTransfer !== undefined, "the session ended with its transfer pending")
    const updates = fake.callUpdates(callSid)
    expect(updates).toHaveLength(1)
    expect(JSON.stringify(updates[0]!.form)).toContain("transfer-outcome")
    expect(pending).toMatchObject({ endReason: "agent_disconnected", pendingTransfer: { to: FALLBACK_NUMBER, initiatedBy: "fallback", answeredAt: null } })

    // The doomed instance dies; nothing will post the <Dial action> (the fake carrier never does).
    await doomed.stop("SIGKILL")
    const events = await until(
      () => receiver!.requests.map((r) => JSON.parse(r.body.toString("utf8"))).filter((e) => e.sessionId === pending.id),
      (all) => all.length > 0,
      "the session.ended sent by the survivor",
      120_000
    )
    expect(events[0]).toMatchObject({
      sessionId: pending.id,
      status: "failed",
      endReason: "agent_disconnected",
      transfers: [{ to: FALLBACK_NUMBER, initiatedBy: "fallback", status: "failed", carrierStatus: null, talkMs: 0, startedAt: pending.pendingTransfer.startedAt }]
    })
    // Closed at its bound, counted from the transfer's start (not from the survivor's reconciliation).
    expect(events[0].transfers[0].ringMs).toBeGreaterThanOrEqual(15_000)
    const [settled] = await sessions()
    expect(settled.pendingTransfer).toBeUndefined()
    expect(settled.transfers).toEqual(events[0].transfers)
    expect(survivor.stdout()).toContain("no outcome came for the transfer within its ring bound")
    // One session.ended (the outbox's delivery id is the session's).
    expect(receiver.requests.map((r) => JSON.parse(r.body.toString("utf8"))).filter((e) => e.sessionId === pending.id)).toHaveLength(1)
  }, 240_000)
})
