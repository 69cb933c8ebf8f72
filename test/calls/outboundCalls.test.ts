import { callTraceIds } from "../../src/observability/Tracing.js"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ApiKeys } from "../../src/apikeys/ApiKeys.js"
import { audioFrames, type Gateway, type Peer, startGateway, telnyxCall, twilioCall, until } from "../livecall/callHarness.js"
import twilio from "twilio"
import { accountSidOf } from "../../src/kernel/TwilioIds.js"
import { verifySignature } from "../../src/webhooks/Signing.js"
import { ADMIN_KEY, type StoreKind } from "../support/testApp.js"
import { CA_FILE, type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { createEnvironment, dialInAgentFor, FALLBACK_NUMBER, fallbackGatewayEnv, type TestEnvironment } from "./outboundHelpers.js"

/**
 * Outbound calls end to end (docs/calls.md, "Placing outbound calls"): /v1 over HTTP, the carrier's
 * side played by the loopback Twilio and Telnyx servers (which record the exact REST requests)
 * and by signed carrier webhooks sent to callgate as the carriers send them, the media stream and
 * the agent over real WebSockets. Every environment has a phone fallback, so "no fallback ran" is
 * visible: no <Dial> and no transfer.
 */

const PUBLIC_URL = "https://callgate.test"
const CUSTOMER = "+14155550142"
const OUR_NUMBER = "+14155550199"
const AGENT_VOICE = audioFrames("agent-greeting.ulaw", 40)
const CONNECTION_ID = "1494404757140276705"

let gateway: Gateway
let receiver: Receiver
beforeAll(async () => {
  receiver = await startReceiver(() => ({ status: 200 }))
})
afterAll(() => receiver.close())

const request = async (method: string, path: string, body?: unknown, key = ADMIN_KEY) => {
  const res = await fetch(`${gateway.httpBase}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {})
  })
  return { status: res.status, body: (await res.json()) as any }
}

const callsPath = (env: TestEnvironment) => `/v1/agents/${env.agentId}/environments/${env.environmentId}/calls`

const place = async (env: TestEnvironment, body: Record<string, unknown> = {}) => {
  const placed = await request("POST", callsPath(env), { to: CUSTOMER, from: OUR_NUMBER, ...body })
  expect(placed.status, JSON.stringify(placed.body)).toBe(201)
  return placed.body.data
}

const sessionOf = async (env: TestEnvironment, sessionId: string) =>
  (await request("GET", `/v1/agents/${env.agentId}/sessions/${sessionId}`)).body.data

/** The session.ended request the webhook receiver got for a session. */
const deliveredFor = (sessionId: string) => receiver.requests.find((r) => r.body.toString().includes(`"sessionId":"${sessionId}"`))

const endedEventsOf = (sessionId: string) => gateway.outbox.events.filter((e) => e.sessionId === sessionId)

/** The entry query callgate put on the carrier's URLs for this session. */
const entryQuery = (env: TestEnvironment, sessionId: string) =>
  new URLSearchParams({ agentId: env.agentId, environmentId: env.environmentId, sessionId }).toString()

/** A Twilio webhook to callgate, signed as Twilio signs it (PUBLIC_URL + path and query, form params). */
const twilioWebhook = async (pathAndQuery: string, form: Record<string, string>) => {
  const res = await fetch(`${gateway.httpBase}${pathAndQuery}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": gateway.twilio.sign(`${PUBLIC_URL}${pathAndQuery}`, form) },
    body: new URLSearchParams(form).toString()
  })
  return { status: res.status, body: await res.text() }
}

const twilioStatus = (env: TestEnvironment, session: { id: string; callId: string }, status: string) =>
  twilioWebhook(`/telephony/twilio/status?${entryQuery(env, session.id)}`, {
    CallSid: session.callId,
    AccountSid: gateway.twilio.accountSid,
    CallStatus: status,
    From: OUR_NUMBER,
    To: CUSTOMER,
    Direction: "outbound-api",
    ApiVersion: "2010-04-01"
  })

/** A Telnyx Call Control webhook to callgate, Ed25519-signed as Telnyx signs it. */
const telnyxWebhook = async (env: TestEnvironment, sessionId: string, event: string, payload: Record<string, unknown>) => {
  const body = gateway.telnyx.callControlEvent(event, { connection_id: CONNECTION_ID, from: OUR_NUMBER, to: CUSTOMER, direction: "outgoing", ...payload })
  const res = await fetch(`${gateway.httpBase}/telephony/telnyx/call-control?${entryQuery(env, sessionId)}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...gateway.telnyx.signWebhook(body) },
    body
  })
  expect(res.status).toBeLessThan(300)
}

/** The agent's side of a timed turn: the caller presses 1, the agent answers with speech. */
const timedTurn = async (carrier: { dtmf: (d: string) => void; sentMedia: () => Array<string> }, agent: Peer) => {
  carrier.dtmf("1")
  await agent.waitForEvent("dtmf")
  for (const frame of AGENT_VOICE) agent.send({ event: "media", media: { payload: frame } })
  await until(() => carrier.sentMedia().length === AGENT_VOICE.length, "the agent's reply at the carrier")
}

const expectNoFallback = async (env: TestEnvironment, session: any) => {
  expect(session.fallback).toBeNull()
  const carrierRequests = [...gateway.twilio.requests, ...gateway.telnyx.requests].filter((r) =>
    decodeURIComponent(`${r.path} ${r.rawBody}`).includes(FALLBACK_NUMBER)
  )
  expect(carrierRequests).toEqual([])
}

describe.each<StoreKind>(["memory", "redis"])("outbound calls, %s store", (store) => {
  beforeAll(async () => {
    gateway = await startGateway({
      store,
      env: { ...fallbackGatewayEnv(CA_FILE), TELNYX_CONNECTION_ID: CONNECTION_ID, TURN_END_SILENCE_MS: "200" }
    })
  })
  afterAll(() => gateway.close())

  describe("outbound Twilio calls", () => {
    it("places the call through Calls.create; ringing; answered: the agent gets start (outbound, metadata); turns timed; signed session.ended outbound", async () => {
      const env = await createEnvironment(gateway, receiver.url(`/events/${store}`))
      expect(env.webhookSecret).toMatch(/^whsec_/)
      const agent = await dialInAgentFor(gateway, env)
      const placed = await place(env, { metadata: { campaign: "renewals", customerId: "c-42" } })
      expect(placed).toMatchObject({ direction: "outbound", status: "queued", provider: "twilio", from: OUR_NUMBER, to: CUSTOMER, metadata: { campaign: "renewals", customerId: "c-42" } })
      expect(placed.callId).toMatch(/^CA[0-9a-f]{32}$/)
      // Visible at once in the sessions API.
      expect(await sessionOf(env, placed.id)).toMatchObject({ id: placed.id, status: "queued", direction: "outbound", callId: placed.callId })

      // The exact Calls.create request.
      const [create] = gateway.twilio.createdCalls()
      expect(create!.path).toBe(`/2010-04-01/Accounts/${gateway.twilio.accountSid}/Calls.json`)
      expect(create!.headers.authorization).toBe(`Basic ${Buffer.from(`${gateway.twilio.accountSid}:${gateway.twilio.authToken}`).toString("base64")}`)
      const query = entryQuery(env, placed.id)
      expect(create!.form).toMatchObject({
        To: CUSTOMER,
        From: OUR_NUMBER,
        Url: `${PUBLIC_URL}/telephony/twilio/voice?${query}`,
        Method: "POST",
        StatusCallback: `${PUBLIC_URL}/telephony/twilio/status?${query}`,
        StatusCallbackMethod: "POST",
        Timeout: "30"
      })
      expect(new URLSearchParams(create!.rawBody).getAll("StatusCallbackEvent")).toEqual(["initiated", "ringing", "answered", "completed"])

      expect((await twilioStatus(env, placed, "initiated")).status).toBe(204)
      expect((await twilioStatus(env, placed, "ringing")).status).toBe(204)
      expect(await sessionOf(env, placed.id)).toMatchObject({ status: "ringing" })

      // Answered: Twilio fetches the voice URL, callgate answers the stream TwiML.
      expect((await twilioStatus(env, placed, "in-progress")).status).toBe(204)
      const voice = await twilioWebhook(`/telephony/twilio/voice?${query}`, {
        CallSid: placed.callId,
        AccountSid: gateway.twilio.accountSid,
        From: OUR_NUMBER,
        To: CUSTOMER,
        Direction: "outbound-api",
        CallStatus: "in-progress"
      })
      expect(voice.status).toBe(200)
      const token = /<Parameter name="token" value="([^"]+)"\/>/.exec(voice.body)![1]!
      const call = await twilioCall(gateway, { token, callSid: placed.callId })
      call.start()
      const [start] = await agent.waitForEvent("start")
      expect(start.start.callSid).toBe(placed.id)
      expect(start.start.customParameters).toEqual({
        campaign: "renewals",
        customerId: "c-42",
        sessionId: placed.id,
        agentId: env.agentId,
        environmentId: env.environmentId,
        from: OUR_NUMBER,
        to: CUSTOMER,
        from_number: OUR_NUMBER,
        to_number: CUSTOMER,
        direction: "outbound",
        provider: "twilio",
        traceparent: `00-${callTraceIds(placed.id).traceId}-${callTraceIds(placed.id).spanId}-00`
      })
      expect(await sessionOf(env, placed.id)).toMatchObject({ status: "active", createdAt: placed.createdAt })

      await timedTurn(call, agent)
      call.stop()
      const ended = await gateway.outbox.forSession(placed.id)
      expect(ended).toMatchObject({
        status: "completed",
        direction: "outbound",
        endReason: "caller_hangup",
        provider: "twilio",
        callId: placed.callId,
        agentPhoneNumber: OUR_NUMBER,
        clientPhoneNumber: CUSTOMER
      })
      const session = await sessionOf(env, placed.id)
      expect(session.turns).toHaveLength(1)
      expect(session.turns[0]).toMatchObject({ input: "dtmf", latencyMs: expect.any(Number) })
      await expectNoFallback(env, session)
      // A completed callback after the stream ended changes nothing.
      expect((await twilioStatus(env, placed, "completed")).status).toBe(204)
      expect(endedEventsOf(placed.id)).toHaveLength(1)

      // Delivered to the environment's webhook, signed with its secret.
      await until(() => deliveredFor(placed.id) !== undefined, "the signed session.ended delivery", 30_000)
      const delivery = deliveredFor(placed.id)!
      expect(
        verifySignature({
          secret: env.webhookSecret!,
          signature: delivery.headers["x-service-signature"] as string,
          timestamp: delivery.headers["x-service-timestamp"] as string,
          rawBody: delivery.body
        })
      ).toBe(true)
      expect(JSON.parse(delivery.body.toString())).toMatchObject({
        event: "session.ended",
        sessionId: placed.id,
        direction: "outbound",
        status: "completed",
        agentPhoneNumber: OUR_NUMBER,
        clientPhoneNumber: CUSTOMER
      })
    })

    it.each([
      ["busy", "busy"],
      ["no-answer", "no_answer"],
      ["failed", "carrier_failed"],
      ["canceled", "canceled"]
    ])("CallStatus %s before an answer: failed, endReason %s, one session.ended, no fallback", async (status, endReason) => {
      const env = await createEnvironment(gateway)
      const placed = await place(env)
      await twilioStatus(env, placed, "ringing")
      expect((await twilioStatus(env, placed, status)).status).toBe(204)
      const ended = await gateway.outbox.forSession(placed.id)
      expect(ended).toMatchObject({ status: "failed", endReason, direction: "outbound", callId: placed.callId })
      // The carrier repeats itself: still one ending.
      expect((await twilioStatus(env, placed, status)).status).toBe(204)
      expect((await twilioStatus(env, placed, "completed")).status).toBe(204)
      const session = await sessionOf(env, placed.id)
      expect(session).toMatchObject({ status: "failed", endReason })
      await expectNoFallback(env, session)
      expect(gateway.twilio.callUpdates(placed.callId)).toEqual([])
      expect(endedEventsOf(placed.id)).toHaveLength(1)
    })

    it("the Twilio-compatible API reads a placed call (queued, outbound-api) and cancels it (Status=canceled) before it is answered", async () => {
      const env = await createEnvironment(gateway)
      const key = (await gateway.run(Effect.flatMap(ApiKeys, (keys) => keys.create({ name: "bot", agentIds: [env.agentId] })))).key
      const client = twilio(accountSidOf(env.agentId), key)
      client.api.baseUrl = gateway.httpBase
      const placed = await place(env)
      expect(await client.calls(placed.id).fetch()).toMatchObject({ sid: placed.id, status: "queued", direction: "outbound-api", to: CUSTOMER, from: OUR_NUMBER })
      await twilioStatus(env, placed, "ringing")
      expect((await client.calls(placed.id).fetch()).status).toBe("ringing")
      expect(await client.calls(placed.id).update({ status: "canceled" })).toMatchObject({ status: "canceled" })
      expect(gateway.twilio.callUpdates(placed.callId).map((r) => r.form)).toEqual([{ Status: "canceled" }])
      expect(await gateway.outbox.forSession(placed.id)).toMatchObject({ status: "failed", endReason: "canceled" })
      expect(endedEventsOf(placed.id)).toHaveLength(1)
    })

    it("Twilio refuses the call: 502 CARRIER_ERROR naming the session, which ends failed (carrier_failed) with one session.ended", async () => {
      const env = await createEnvironment(gateway)
      gateway.twilio.failNext({ status: 400, code: 21211, message: "Invalid 'To' Phone Number" })
      const refused = await request("POST", callsPath(env), { to: CUSTOMER, from: OUR_NUMBER })
      expect(refused.status).toBe(502)
      expect(refused.body.error).toMatchObject({ code: "CARRIER_ERROR", message: expect.stringContaining("21211") })
      const sessionId = /session (ses_[A-Za-z0-9_-]+)/.exec(refused.body.error.message)![1]!
      expect(await gateway.outbox.forSession(sessionId)).toMatchObject({ status: "failed", endReason: "carrier_failed", direction: "outbound" })
      expect(await sessionOf(env, sessionId)).toMatchObject({ status: "failed", endReason: "carrier_failed", callId: "" })
      expect(endedEventsOf(sessionId)).toHaveLength(1)
    })

    it("a status callback with a bad signature is refused (401) and changes nothing", async () => {
      const env = await createEnvironment(gateway)
      const placed = await place(env)
      const res = await fetch(`${gateway.httpBase}/telephony/twilio/status?${entryQuery(env, placed.id)}`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": "bm90IGEgc2lnbmF0dXJl" },
        body: new URLSearchParams({ CallSid: placed.callId, CallStatus: "busy" }).toString()
      })
      expect(res.status).toBe(401)
      expect(await sessionOf(env, placed.id)).toMatchObject({ status: "queued" })
      await request("DELETE", `${callsPath(env)}/${placed.id}`)
    })

    it("DELETE before an answer cancels (Status=canceled): failed, canceled, one session.ended; DELETE of a live call hangs up", async () => {
      const env = await createEnvironment(gateway)
      const placed = await place(env)
      const canceled = await request("DELETE", `${callsPath(env)}/${placed.id}`)
      expect(canceled.status).toBe(200)
      expect(canceled.body.data).toMatchObject({ id: placed.id, status: "failed", endReason: "canceled" })
      expect(gateway.twilio.callUpdates(placed.callId).map((r) => r.form)).toEqual([{ Status: "canceled" }])
      expect(await gateway.outbox.forSession(placed.id)).toMatchObject({ status: "failed", endReason: "canceled" })
      // Twilio then reports the cancel: nothing more happens.
      await twilioStatus(env, placed, "canceled")
      expect(endedEventsOf(placed.id)).toHaveLength(1)
      // Again: the ended session as it stands.
      expect((await request("DELETE", `${callsPath(env)}/${placed.id}`)).body.data).toMatchObject({ status: "failed", endReason: "canceled" })

      // A live one: answered, streaming, then hung up through the API.
      const agent = await dialInAgentFor(gateway, env)
      const live = await place(env)
      const voice = await twilioWebhook(`/telephony/twilio/voice?${entryQuery(env, live.id)}`, {
        CallSid: live.callId,
        AccountSid: gateway.twilio.accountSid,
        From: OUR_NUMBER,
        To: CUSTOMER,
        Direction: "outbound-api"
      })
      const call = await twilioCall(gateway, { token: /name="token" value="([^"]+)"/.exec(voice.body)![1]!, callSid: live.callId })
      call.start()
      await agent.waitForEvent("start")
      const hungUp = await request("DELETE", `${callsPath(env)}/${live.id}`)
      expect(hungUp.body.data).toMatchObject({ id: live.id, status: "completed", endReason: "api_hangup" })
      expect(gateway.twilio.callUpdates(live.callId).map((r) => r.form)).toEqual([{ Status: "completed" }])
      await agent.waitClosed()
    })

    it("a stream for a session nobody placed, or for another call than the one placed, is refused (1008)", async () => {
      const env = await createEnvironment(gateway)
      const placed = await place(env)
      // The voice URL is signed, so only callgate's own query reaches it; a token for another CallSid of the same session is refused.
      const voice = await twilioWebhook(`/telephony/twilio/voice?${entryQuery(env, placed.id)}`, {
        CallSid: "CAffffffffffffffffffffffffffffffff",
        AccountSid: gateway.twilio.accountSid,
        Direction: "outbound-api"
      })
      const token = /name="token" value="([^"]+)"/.exec(voice.body)![1]!
      const call = await twilioCall(gateway, { token, callSid: "CAffffffffffffffffffffffffffffffff" })
      call.start()
      expect((await call.peer.waitClosed()).code).toBe(1008)
      expect(await sessionOf(env, placed.id)).toMatchObject({ status: "queued" })
      await request("DELETE", `${callsPath(env)}/${placed.id}`)
    })
  })

  describe("outbound Telnyx calls", () => {
    it("dials through Call Control; call.answered starts the stream; the agent gets start (outbound, metadata); session.ended outbound", async () => {
      const env = await createEnvironment(gateway)
      const agent = await dialInAgentFor(gateway, env)
      const placed = await place(env, { provider: "telnyx", timeoutSeconds: 20, metadata: { campaign: "renewals" } })
      expect(placed).toMatchObject({ direction: "outbound", status: "queued", provider: "telnyx" })
      const [dial] = gateway.telnyx.dialed()
      expect(placed.callId).toBe(dial!.callControlId)
      expect(dial!.path).toBe("/v2/calls")
      expect(dial!.headers.authorization).toBe(`Bearer ${gateway.telnyx.apiKey}`)
      expect(dial!.json).toEqual({
        connection_id: CONNECTION_ID,
        to: CUSTOMER,
        from: OUR_NUMBER,
        webhook_url: `${PUBLIC_URL}/telephony/telnyx/call-control?${entryQuery(env, placed.id)}`,
        webhook_url_method: "POST",
        timeout_secs: 20,
        command_id: expect.any(String)
      })

      await telnyxWebhook(env, placed.id, "call.initiated", { call_control_id: placed.callId })
      await telnyxWebhook(env, placed.id, "call.answered", { call_control_id: placed.callId })
      await until(() => gateway.telnyx.commands(placed.callId, "streaming_start").length === 1, "streaming_start")
      const streaming = gateway.telnyx.commands(placed.callId, "streaming_start")[0]!.json as { stream_url: string; stream_auth_token: string }
      expect(streaming).toMatchObject({ stream_track: "inbound_track", stream_bidirectional_mode: "rtp", stream_bidirectional_codec: "PCMU" })
      const token = new URL(streaming.stream_url).searchParams.get("token")!
      expect(streaming.stream_auth_token).toBe(token)
      const call = await telnyxCall(gateway, { token, callControlId: placed.callId, headers: { authorization: `Bearer ${token}` } })
      call.start()
      const [start] = await agent.waitForEvent("start")
      expect(start.start.customParameters).toMatchObject({ campaign: "renewals", sessionId: placed.id, direction: "outbound", provider: "telnyx" })

      await timedTurn(call, agent)
      call.stop()
      const ended = await gateway.outbox.forSession(placed.id)
      expect(ended).toMatchObject({ status: "completed", direction: "outbound", provider: "telnyx", callId: placed.callId })
      const session = await sessionOf(env, placed.id)
      expect(session.turns[0]).toMatchObject({ input: "dtmf", latencyMs: expect.any(Number) })
      await expectNoFallback(env, session)
    })

    it.each([
      ["busy", "busy"],
      ["timeout", "no_answer"],
      ["call_rejected", "carrier_failed"],
      ["originator_cancel", "canceled"]
    ])("call.hangup (%s) before an answer: failed, endReason %s, one session.ended, no fallback", async (cause, endReason) => {
      const env = await createEnvironment(gateway)
      const placed = await place(env, { provider: "telnyx" })
      await telnyxWebhook(env, placed.id, "call.hangup", { call_control_id: placed.callId, hangup_cause: cause })
      const ended = await gateway.outbox.forSession(placed.id)
      expect(ended).toMatchObject({ status: "failed", endReason, direction: "outbound", provider: "telnyx" })
      const session = await sessionOf(env, placed.id)
      await expectNoFallback(env, session)
      expect(gateway.telnyx.commands(placed.callId)).toEqual([])
      // Repeated: still one ending. Hangups are handled in order, so once a later call's hangup has
      // ended that call, the repeat has been handled too.
      await telnyxWebhook(env, placed.id, "call.hangup", { call_control_id: placed.callId, hangup_cause: cause })
      const again = await place(env, { provider: "telnyx" })
      await telnyxWebhook(env, again.id, "call.hangup", { call_control_id: again.callId, hangup_cause: "busy" })
      await gateway.outbox.forSession(again.id)
      expect(endedEventsOf(placed.id)).toHaveLength(1)
    })

    it("DELETE before an answer hangs the Telnyx call up: failed, canceled", async () => {
      const env = await createEnvironment(gateway)
      const placed = await place(env, { provider: "telnyx" })
      const canceled = await request("DELETE", `${callsPath(env)}/${placed.id}`)
      expect(canceled.body.data).toMatchObject({ status: "failed", endReason: "canceled" })
      expect(gateway.telnyx.commands(placed.callId).map((r) => decodeURIComponent(r.path))).toEqual([`/v2/calls/${placed.callId}/actions/hangup`])
      expect(await gateway.outbox.forSession(placed.id)).toMatchObject({ status: "failed", endReason: "canceled" })
    })
  })

  describe("limits and access", () => {
    it("maxConcurrentOutboundCalls (PATCH-able, default 10): beyond it 429; a slot frees when a call ends", async () => {
      const env = await createEnvironment(gateway)
      const view = (await request("GET", `/v1/agents/${env.agentId}/environments/${env.environmentId}`)).body.data
      expect(view.maxConcurrentOutboundCalls).toBe(10)
      const patched = await request("PATCH", `/v1/agents/${env.agentId}/environments/${env.environmentId}`, { maxConcurrentOutboundCalls: 2 })
      expect(patched.body.data.maxConcurrentOutboundCalls).toBe(2)
      expect((await request("PATCH", `/v1/agents/${env.agentId}/environments/${env.environmentId}`, { maxConcurrentOutboundCalls: 0 })).status).toBe(400)

      const first = await place(env)
      const second = await place(env)
      const refused = await request("POST", callsPath(env), { to: CUSTOMER, from: OUR_NUMBER })
      expect(refused.status).toBe(429)
      expect(refused.body.error).toMatchObject({ code: "RATE_LIMITED", message: expect.stringContaining("maxConcurrentOutboundCalls") })

      await twilioStatus(env, first, "no-answer")
      await gateway.outbox.forSession(first.id)
      const third = await place(env)
      await request("DELETE", `${callsPath(env)}/${second.id}`)
      await request("DELETE", `${callsPath(env)}/${third.id}`)
    })

    it("a scoped key places calls for its own agents only (403 for another's); bad bodies are 400 naming the field", async () => {
      const env = await createEnvironment(gateway)
      const other = await createEnvironment(gateway)
      const key = (await gateway.run(Effect.flatMap(ApiKeys, (keys) => keys.create({ name: "dialer", agentIds: [env.agentId] })))).key
      const forbidden = await request("POST", callsPath(other), { to: CUSTOMER, from: OUR_NUMBER }, key)
      expect(forbidden.status).toBe(403)
      expect(forbidden.body.error.code).toBe("FORBIDDEN")
      const own = await request("POST", callsPath(env), { to: CUSTOMER, from: OUR_NUMBER }, key)
      expect(own.status).toBe(201)
      expect((await request("DELETE", `${callsPath(other)}/${own.body.data.id}`, undefined, key)).status).toBe(403)
      expect((await request("DELETE", `${callsPath(env)}/${own.body.data.id}`, undefined, key)).status).toBe(200)

      const bad = await request("POST", callsPath(env), { to: "4155550142", from: OUR_NUMBER, provider: "skype" })
      expect(bad.status).toBe(400)
      expect(bad.body.error.details.map((d: { field: string }) => d.field).sort()).toEqual(["provider", "to"])
      const missing = await request("POST", `/v1/agents/${env.agentId}/environments/env_missing/calls`, { to: CUSTOMER, from: OUR_NUMBER })
      expect(missing.status).toBe(404)
    })
  })
})
