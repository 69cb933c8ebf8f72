import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Gateway, startGateway, telnyxCall, twilioCall, until } from "../livecall/callHarness.js"
import { ADMIN_KEY } from "../support/testApp.js"
import { CA_FILE, eventually } from "../webhooks/httpsReceiver.js"
import { createEnvironment, dialInAgentFor, fallbackGatewayEnv, type TestEnvironment } from "./outboundHelpers.js"

/**
 * Answering-machine detection on outbound calls (docs/calls.md, "Answering-machine detection"):
 * the request to the carrier (the loopback Twilio and Telnyx servers record it), the carrier's
 * verdict sent to callgate as the carrier sends it, before the media stream started (the agent's
 * `start.customParameters.answeredBy`) and after (an `amd` message), and the verdict on the session
 * record and in session.ended.
 */

const PUBLIC_URL = "https://callgate.test"
const CUSTOMER = "+14155550142"
const OUR_NUMBER = "+14155550199"
const CONNECTION_ID = "1494404757140276705"

let gateway: Gateway
beforeAll(async () => {
  gateway = await startGateway({ env: { ...fallbackGatewayEnv(CA_FILE), TELNYX_CONNECTION_ID: CONNECTION_ID } })
})
afterAll(() => gateway.close())

const request = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${gateway.httpBase}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_KEY}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {})
  })
  return { status: res.status, body: (await res.json()) as any }
}
const callsPath = (env: TestEnvironment) => `/v1/agents/${env.agentId}/environments/${env.environmentId}/calls`
const place = async (env: TestEnvironment, body: Record<string, unknown>) => {
  const placed = await request("POST", callsPath(env), { to: CUSTOMER, from: OUR_NUMBER, ...body })
  expect(placed.status, JSON.stringify(placed.body)).toBe(201)
  return placed.body.data as { id: string; callId: string }
}
const sessionOf = async (env: TestEnvironment, sessionId: string) => (await request("GET", `/v1/agents/${env.agentId}/sessions/${sessionId}`)).body.data
const entryQuery = (env: TestEnvironment, sessionId: string) =>
  new URLSearchParams({ agentId: env.agentId, environmentId: env.environmentId, sessionId }).toString()

const twilioWebhook = async (pathAndQuery: string, form: Record<string, string>) => {
  const res = await fetch(`${gateway.httpBase}${pathAndQuery}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": gateway.twilio.sign(`${PUBLIC_URL}${pathAndQuery}`, form) },
    body: new URLSearchParams(form).toString()
  })
  return { status: res.status, body: await res.text() }
}
/** Twilio's AsyncAmdStatusCallback request. */
const twilioAmd = (env: TestEnvironment, placed: { id: string; callId: string }, answeredBy: string) =>
  twilioWebhook(`/telephony/twilio/amd?${entryQuery(env, placed.id)}`, {
    CallSid: placed.callId,
    AccountSid: gateway.twilio.accountSid,
    AnsweredBy: answeredBy,
    MachineDetectionDuration: "2210"
  })
/** Answered: Twilio fetches the voice URL; the stream opens with the TwiML's token. */
const twilioAnswer = async (env: TestEnvironment, placed: { id: string; callId: string }) => {
  const voice = await twilioWebhook(`/telephony/twilio/voice?${entryQuery(env, placed.id)}`, {
    CallSid: placed.callId,
    AccountSid: gateway.twilio.accountSid,
    From: OUR_NUMBER,
    To: CUSTOMER,
    Direction: "outbound-api"
  })
  const call = await twilioCall(gateway, { token: /name="token" value="([^"]+)"/.exec(voice.body)![1]!, callSid: placed.callId })
  call.start()
  return call
}

const telnyxWebhook = async (env: TestEnvironment, sessionId: string, event: string, payload: Record<string, unknown>) => {
  const body = gateway.telnyx.callControlEvent(event, { connection_id: CONNECTION_ID, from: OUR_NUMBER, to: CUSTOMER, direction: "outgoing", ...payload })
  const res = await fetch(`${gateway.httpBase}/telephony/telnyx/call-control?${entryQuery(env, sessionId)}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...gateway.telnyx.signWebhook(body) },
    body
  })
  expect(res.status).toBe(200)
}
const telnyxAnswer = async (env: TestEnvironment, placed: { id: string; callId: string }) => {
  await telnyxWebhook(env, placed.id, "call.answered", { call_control_id: placed.callId })
  await until(() => gateway.telnyx.commands(placed.callId, "streaming_start").length === 1, "streaming_start")
  const streaming = gateway.telnyx.commands(placed.callId, "streaming_start")[0]!.json as { stream_url: string }
  const token = new URL(streaming.stream_url).searchParams.get("token")!
  const call = await telnyxCall(gateway, { token, callControlId: placed.callId, headers: { authorization: `Bearer ${token}` } })
  call.start()
  return call
}

describe("answering-machine detection on outbound calls", () => {
  it("machineDetection is off, detect or detect-message-end; anything else is 400", async () => {
    const env = await createEnvironment(gateway)
    const refused = await request("POST", callsPath(env), { to: CUSTOMER, from: OUR_NUMBER, machineDetection: "yes" })
    expect(refused.status).toBe(400)
    expect(refused.body.error.details).toEqual([{ field: "machineDetection", message: "must be one of off, detect, detect-message-end" }])
    const off = await place(env, { machineDetection: "off" })
    const create = gateway.twilio.createdCalls().find((c) => c.form?.To === CUSTOMER && c.rawBody.includes(encodeURIComponent(off.id)))!
    expect(create.form).not.toHaveProperty("MachineDetection")
    await request("DELETE", `${callsPath(env)}/${off.id}`)
  })

  it("Twilio, detect, verdict before the stream: MachineDetection=Enable with AsyncAmd; start.customParameters.answeredBy; the record and session.ended", async () => {
    const env = await createEnvironment(gateway)
    const agent = await dialInAgentFor(gateway, env)
    const placed = await place(env, { machineDetection: "detect" })
    const create = gateway.twilio.createdCalls().find((c) => c.rawBody.includes(encodeURIComponent(placed.id)))!
    expect(create.form).toMatchObject({
      MachineDetection: "Enable",
      AsyncAmd: "true",
      AsyncAmdStatusCallback: `${PUBLIC_URL}/telephony/twilio/amd?${entryQuery(env, placed.id)}`,
      AsyncAmdStatusCallbackMethod: "POST"
    })
    expect((await twilioAmd(env, placed, "machine_start")).status).toBe(204)
    expect(await sessionOf(env, placed.id)).toMatchObject({ status: "queued", answeredBy: "machine", answeredByDetail: "machine_start" })

    const call = await twilioAnswer(env, placed)
    const [start] = await agent.waitForEvent("start")
    expect(start.start.customParameters).toMatchObject({ sessionId: placed.id, answeredBy: "machine" })
    // A second verdict does not replace the first.
    expect((await twilioAmd(env, placed, "human")).status).toBe(204)
    call.stop()
    expect(await gateway.outbox.forSession(placed.id)).toMatchObject({ status: "completed", answeredBy: "machine" })
    expect(await sessionOf(env, placed.id)).toMatchObject({ answeredBy: "machine", answeredByDetail: "machine_start" })
    expect(agent.events("amd")).toEqual([])
  })

  it("Twilio, detect-message-end, verdict after the stream started: an amd message to the agent, then the record and session.ended", async () => {
    const env = await createEnvironment(gateway)
    const agent = await dialInAgentFor(gateway, env)
    const placed = await place(env, { machineDetection: "detect-message-end" })
    expect(gateway.twilio.createdCalls().find((c) => c.rawBody.includes(encodeURIComponent(placed.id)))!.form).toMatchObject({ MachineDetection: "DetectMessageEnd" })
    const call = await twilioAnswer(env, placed)
    const [start] = await agent.waitForEvent("start")
    expect(start.start.customParameters).not.toHaveProperty("answeredBy")
    expect((await twilioAmd(env, placed, "machine_end_beep")).status).toBe(204)
    const [amd] = await agent.waitForEvent("amd")
    expect(amd).toMatchObject({ event: "amd", streamSid: start.start.streamSid, amd: { answeredBy: "machine", detail: "machine_end_beep" } })
    call.stop()
    expect(await gateway.outbox.forSession(placed.id)).toMatchObject({ status: "completed", answeredBy: "machine" })
    expect(await sessionOf(env, placed.id)).toMatchObject({ answeredBy: "machine", answeredByDetail: "machine_end_beep" })
  })

  it("Twilio: an AMD callback with a bad signature is refused (401) and changes nothing", async () => {
    const env = await createEnvironment(gateway)
    const placed = await place(env, { machineDetection: "detect" })
    const res = await fetch(`${gateway.httpBase}/telephony/twilio/amd?${entryQuery(env, placed.id)}`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": "bm90IGEgc2lnbmF0dXJl" },
      body: new URLSearchParams({ CallSid: placed.callId, AnsweredBy: "human" }).toString()
    })
    expect(res.status).toBe(401)
    expect(await sessionOf(env, placed.id)).not.toHaveProperty("answeredBy")
    await request("DELETE", `${callsPath(env)}/${placed.id}`)
  })

  it("Telnyx, detect, verdict before the stream: answering_machine_detection=detect; call.machine.detection.ended human reaches start", async () => {
    const env = await createEnvironment(gateway)
    const agent = await dialInAgentFor(gateway, env)
    const placed = await place(env, { provider: "telnyx", machineDetection: "detect" })
    const dial = gateway.telnyx.dialed().find((d) => d.callControlId === placed.callId)!
    expect(dial.json).toMatchObject({ answering_machine_detection: "detect" })
    await telnyxWebhook(env, placed.id, "call.machine.detection.ended", { call_control_id: placed.callId, result: "human" })
    await eventually(async () => ((await sessionOf(env, placed.id)).answeredBy === "human" ? true : undefined), 30_000)
    const call = await telnyxAnswer(env, placed)
    const [start] = await agent.waitForEvent("start")
    expect(start.start.customParameters).toMatchObject({ sessionId: placed.id, answeredBy: "human" })
    call.stop()
    expect(await gateway.outbox.forSession(placed.id)).toMatchObject({ status: "completed", provider: "telnyx", answeredBy: "human" })
  })

  it("Telnyx, detect-message-end (greeting_end), verdict after the stream: a machine is reported when its greeting ended, as an amd message", async () => {
    const env = await createEnvironment(gateway)
    const agent = await dialInAgentFor(gateway, env)
    const placed = await place(env, { provider: "telnyx", machineDetection: "detect-message-end" })
    expect(gateway.telnyx.dialed().find((d) => d.callControlId === placed.callId)!.json).toMatchObject({ answering_machine_detection: "greeting_end" })
    const call = await telnyxAnswer(env, placed)
    const [start] = await agent.waitForEvent("start")
    expect(start.start.customParameters).not.toHaveProperty("answeredBy")
    await telnyxWebhook(env, placed.id, "call.machine.detection.ended", { call_control_id: placed.callId, result: "machine" })
    await telnyxWebhook(env, placed.id, "call.machine.greeting.ended", { call_control_id: placed.callId, result: "beep_detected" })
    const [amd] = await agent.waitForEvent("amd")
    expect(amd.amd).toEqual({ answeredBy: "machine", detail: "greeting_beep_detected" })
    // The detection webhook alone sent nothing: the greeting's end is the one verdict.
    expect(agent.events("amd")).toHaveLength(1)
    call.stop()
    expect(await gateway.outbox.forSession(placed.id)).toMatchObject({ status: "completed", answeredBy: "machine" })
    expect(await sessionOf(env, placed.id)).toMatchObject({ answeredBy: "machine", answeredByDetail: "greeting_beep_detected" })
  })
})
