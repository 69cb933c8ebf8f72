import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Gateway, startGateway, until } from "../livecall/callHarness.js"
import { ADMIN_KEY } from "../support/testApp.js"
import { createEnvironment } from "./outboundHelpers.js"

/**
 * An outbound call whose carrier reports are lost must not stay open (holding its concurrency
 * slot) for ever: OUTBOUND_ANSWER_GRACE past its ring timeout callgate cancels it at the carrier
 * and ends the session. Here the grace is 1 s and the ring timeout 5 s; the test waits for the
 * session.ended that proves it, however long the machine takes.
 */
const PUBLIC_URL = "https://callgate.test"

let gateway: Gateway
beforeAll(async () => {
  gateway = await startGateway({ env: { OUTBOUND_ANSWER_GRACE: "1s" } })
})
afterAll(() => gateway.close())

/** The session's session.ended; the wait is generous: the grace runs out 6 s after placing. */
const endedFor = async (sessionId: string) => {
  await until(() => gateway.outbox.events.some((e) => e.sessionId === sessionId), `session.ended for ${sessionId}`, 60_000)
  return gateway.outbox.events.find((e) => e.sessionId === sessionId)!
}

const place = async (agentId: string, environmentId: string) => {
  const res = await fetch(`${gateway.httpBase}/v1/agents/${agentId}/environments/${environmentId}/calls`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ to: "+14155550142", from: "+14155550199", timeoutSeconds: 5 })
  })
  expect(res.status).toBe(201)
  return ((await res.json()) as any).data
}

describe("outbound calls whose carrier goes quiet", () => {
  it("never reported: canceled at the carrier, the session failed with no_answer, the slot free again", async () => {
    const env = await createEnvironment(gateway)
    await fetch(`${gateway.httpBase}/v1/agents/${env.agentId}/environments/${env.environmentId}`, {
      method: "PATCH",
      headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ maxConcurrentOutboundCalls: 1 })
    })
    const placed = await place(env.agentId, env.environmentId)
    const ended = await endedFor(placed.id)
    expect(ended).toMatchObject({ status: "failed", endReason: "no_answer", direction: "outbound" })
    expect(gateway.twilio.callUpdates(placed.callId).map((r) => r.form)).toEqual([{ Status: "canceled" }])
    // The one slot is free again.
    const next = await place(env.agentId, env.environmentId)
    await fetch(`${gateway.httpBase}/v1/agents/${env.agentId}/environments/${env.environmentId}/calls/${next.id}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${ADMIN_KEY}` }
    })
  })

  it("answered but its stream never came: carrier_failed", async () => {
    const env = await createEnvironment(gateway)
    const placed = await place(env.agentId, env.environmentId)
    const query = new URLSearchParams({ agentId: env.agentId, environmentId: env.environmentId, sessionId: placed.id }).toString()
    const form = { CallSid: placed.callId, AccountSid: gateway.twilio.accountSid, CallStatus: "in-progress" }
    const res = await fetch(`${gateway.httpBase}/telephony/twilio/status?${query}`, {
      method: "POST",
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        "x-twilio-signature": gateway.twilio.sign(`${PUBLIC_URL}/telephony/twilio/status?${query}`, form)
      },
      body: new URLSearchParams(form).toString()
    })
    expect(res.status).toBe(204)
    const ended = await endedFor(placed.id)
    expect(ended).toMatchObject({ status: "failed", endReason: "carrier_failed" })
  })
})

describe("a carrier that cannot place calls", () => {
  it("Telnyx without TELNYX_CONNECTION_ID: 400 naming provider, nothing placed", async () => {
    const env = await createEnvironment(gateway)
    const res = await fetch(`${gateway.httpBase}/v1/agents/${env.agentId}/environments/${env.environmentId}/calls`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ to: "+14155550142", from: "+14155550199", provider: "telnyx" })
    })
    expect(res.status).toBe(400)
    expect(((await res.json()) as any).error).toMatchObject({
      code: "VALIDATION_FAILED",
      details: [{ field: "provider", message: "cannot place calls: TELNYX_CONNECTION_ID not set" }]
    })
    expect(gateway.telnyx.requests).toEqual([])
  })
})

describe("outbound calls at shutdown", () => {
  it("calls still ringing are canceled at the carrier and their sessions end canceled", async () => {
    const own = await startGateway({})
    const env = await createEnvironment(own)
    const res = await fetch(`${own.httpBase}/v1/agents/${env.agentId}/environments/${env.environmentId}/calls`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ to: "+14155550142", from: "+14155550199" })
    })
    const placed = ((await res.json()) as any).data
    await own.close()
    expect(own.twilio.callUpdates(placed.callId).map((r) => r.form)).toEqual([{ Status: "canceled" }])
    expect(own.outbox.events.filter((e) => e.sessionId === placed.id)).toMatchObject([{ status: "failed", endReason: "canceled" }])
  })
})
