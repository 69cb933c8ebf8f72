import type { Socket } from "node:net"
import { expect } from "vitest"
import { WebSocket } from "ws"
import type { CallKind } from "../../src/kernel/Carrier.js"
import type { RecordedRequest } from "../support/recordingServer.js"
import { ADMIN_KEY, uniqueId } from "../support/testApp.js"
import {
  audioFrames,
  type CarrierCall,
  dialInAgent,
  type Gateway,
  type Peer,
  telnyxCall,
  twilioCall,
  until
} from "../livecall/callHarness.js"

/**
 * Live calls for the error fallback's end-to-end tests: one call of any carrier kind through the
 * call harness, the triggers that fail it, and the carrier REST requests it caused. Everything
 * goes over real sockets: /v1 over HTTP, streams and agents over WebSocket, carrier REST to the
 * fake Twilio and Telnyx servers.
 */

export const CALLER = "+14155550100"
/** The agent's own number: the To of an inbound call, shown as the caller id of a transfer. */
export const AGENT_NUMBER = "+14155550199"
export const FALLBACK_NUMBER = "+14155550123"
export const TEXML_ACCOUNT = "texml-account-1"

export const CALL_KINDS: ReadonlyArray<CallKind> = ["twilio", "telnyx-texml", "telnyx-call-control"]

/** Real speech (a caller turn), then mu-law silence. */
export const CALLER_SPEECH = audioFrames("caller-appointment.ulaw", 100)
export const SILENCE = Buffer.alloc(160, 0xff).toString("base64")

/** Gateway settings for these tests: the fallback webhook receiver is on loopback with the test CA. */
export const fallbackGatewayEnv = (caFile: string) => ({
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
  WEBHOOK_CA_FILE: caFile,
  FALLBACK_WEBHOOK_TIMEOUT: "2s",
  // A short end-of-turn silence keeps the breaker cases quick; the trip still needs the 1 s timeout.
  TURN_END_SILENCE_MS: "200"
})

// ---------------------------------------------------------------------------------------------
// /v1 over HTTP

export const api = async (gateway: Gateway, method: string, path: string, body?: unknown) => {
  const res = await fetch(`${gateway.httpBase}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_KEY}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {})
  })
  const json = (await res.json()) as any
  expect(res.status, `${method} ${path}: ${JSON.stringify(json)}`).toBeLessThan(300)
  return json.data
}

export interface TestEnvironment {
  readonly agentId: string
  readonly environmentId: string
  /** The error fallback webhook secret as the create response showed it (null unless type webhook). */
  readonly secret: string | null
}

export const createEnvironment = async (gateway: Gateway, settings: Record<string, unknown>): Promise<TestEnvironment> => {
  const agentId = uniqueId("agent")
  const view = await api(gateway, "POST", `/v1/agents/${agentId}/environments`, { name: "fallback line", ...settings })
  return { agentId, environmentId: view.id, secret: view.errorFallbackWebhookSecret }
}

export const getSession = (gateway: Gateway, agentId: string, sessionId: string) =>
  api(gateway, "GET", `/v1/agents/${agentId}/sessions/${sessionId}`)

// ---------------------------------------------------------------------------------------------
// Calls

export interface LiveCall {
  readonly kind: CallKind
  readonly callId: string
  readonly carrier: CarrierCall
  /** The dial-in agent serving the call, when one was connected. */
  readonly agent: Peer | undefined
}

const newCallId = (kind: CallKind) =>
  kind === "twilio"
    ? `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    : kind === "telnyx-call-control"
      ? `v3:${uniqueId("cc")}`
      : `texml-${uniqueId("t").replace(/[^A-Za-z0-9]/g, "")}`

/**
 * Places an inbound call (from CALLER to AGENT_NUMBER) of `kind` on the environment: a dial-in
 * agent first when `withAgent`, then the carrier's media stream, started. Resolves once the agent
 * has its `start` (or, without an agent, once the stream is started).
 */
export const placeCall = async (
  gateway: Gateway,
  env: TestEnvironment,
  kind: CallKind,
  withAgent = true,
  /** A Telnyx stream's `media_format` (default PCMU, 8 kHz). */
  format: { readonly encoding?: "PCMU" | "PCMA" | "L16"; readonly sampleRate?: 8000 | 16000 } = {}
): Promise<LiveCall> => {
  const { agentId, environmentId } = env
  let agent: Peer | undefined
  if (withAgent) {
    agent = await dialInAgent(gateway, agentId, environmentId)
    await until(() => gateway.idleAgents(agentId, environmentId) === 1, "the agent to be idle")
  }
  const callId = newCallId(kind)
  const token = gateway.issueToken({
    agentId,
    environmentId,
    kind,
    callId,
    from: CALLER,
    to: AGENT_NUMBER,
    ...(kind === "telnyx-texml" ? { accountSid: TEXML_ACCOUNT } : {})
  })
  const carrier =
    kind === "twilio"
      ? await twilioCall(gateway, { token, callSid: callId })
      : await telnyxCall(gateway, {
          token,
          // A TeXML call's stream names its own call_control_id, not the TeXML CallSid.
          callControlId: kind === "telnyx-call-control" ? callId : `v3:${uniqueId("texml-leg")}`,
          headers: { authorization: `Bearer ${token}` },
          ...format
        })
  carrier.start()
  if (agent !== undefined) await agent.waitForEvent("start")
  return { kind, callId, carrier, agent }
}

/**
 * The carrier's stream fails. Telnyx: an `error` frame (as Telnyx sends it). Twilio has no error
 * frame: a malformed WebSocket frame on the stream's connection (an unmasked client frame), which
 * the socket layer reports as a fault.
 */
export const breakCarrierStream = (call: LiveCall) => {
  if (call.kind === "twilio") {
    const raw = (call.carrier.peer.ws as unknown as { _socket: Socket })._socket
    raw.write(Buffer.from([0x81, 0x02, 0x68, 0x69]))
    return
  }
  call.carrier.peer.send({
    event: "error",
    sequence_number: "999",
    stream_id: call.carrier.streamId,
    payload: { code: 100002, title: "unknown_error", detail: "An unknown error has occurred" }
  })
}

/**
 * A caller turn of real speech, then silence paced like a live line (a frame every 20 ms) until
 * callgate closes the stream or the returned stop is called.
 */
export const speakThenListen = (call: LiveCall): (() => void) => {
  for (const frame of CALLER_SPEECH) call.carrier.media(frame)
  const timer = setInterval(() => {
    if (call.carrier.peer.ws.readyState === WebSocket.OPEN) call.carrier.media(SILENCE)
    else clearInterval(timer)
  }, 20)
  return () => clearInterval(timer)
}

// ---------------------------------------------------------------------------------------------
// What happened

/** Every carrier REST request (at either fake carrier) that names this call. */
export const carrierRequestsFor = (gateway: Gateway, callId: string): ReadonlyArray<RecordedRequest> =>
  [...gateway.twilio.requests, ...gateway.telnyx.requests].filter((r) => decodeURIComponent(r.path).includes(callId))

/** The session.ended events of a call (there must be exactly one). */
export const endedEventsFor = (gateway: Gateway, callId: string) => gateway.outbox.events.filter((e) => e.callId === callId)

export const waitForEnded = async (gateway: Gateway, callId: string) => {
  await until(() => endedEventsFor(gateway, callId).length > 0, `session.ended for ${callId}`, 30_000)
  return endedEventsFor(gateway, callId)[0]!
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/** The exact REST request that `action` is for a call of `kind`: path, auth, and form or JSON body. */
export const expectCarrierRequest = (
  gateway: Gateway,
  call: { kind: CallKind; callId: string },
  request: RecordedRequest,
  action: { hangup: true } | { dial: string; callerId: string; tracked?: TransferRef } | { twiml: string }
) => {
  expect(request.method).toBe("POST")
  if (call.kind === "twilio") {
    const { accountSid, authToken } = gateway.twilio
    expect(request.path).toBe(`/2010-04-01/Accounts/${accountSid}/Calls/${call.callId}.json`)
    expect(request.headers.authorization).toBe(`Basic ${Buffer.from(`${accountSid}:${authToken}`).toString("base64")}`)
    expect(request.form).toEqual(
      "hangup" in action
        ? { Status: "completed" }
        : "dial" in action
          ? { Twiml: dialDocument("twilio", action.dial, action.callerId, action.tracked) }
          : { Twiml: action.twiml }
    )
    return
  }
  expect(request.headers.authorization).toBe(`Bearer ${gateway.telnyx.apiKey}`)
  if (call.kind === "telnyx-texml") {
    expect(decodeURIComponent(request.path)).toBe(`/v2/texml/Accounts/${TEXML_ACCOUNT}/Calls/${call.callId}`)
    expect(request.form).toEqual(
      "hangup" in action
        ? { Status: "completed" }
        : "dial" in action
          ? { Texml: dialDocument("telnyx", action.dial, action.callerId, action.tracked) }
          : { Texml: action.twiml }
    )
    return
  }
  if ("twiml" in action) throw new Error("a Call Control call gets translated commands, not markup")
  const name = "hangup" in action ? "hangup" : "transfer"
  expect(decodeURIComponent(request.path)).toBe(`/v2/calls/${call.callId}/actions/${name}`)
  expect(request.json).toEqual(
    "hangup" in action
      ? { command_id: expect.stringMatching(UUID) }
      : action.tracked === undefined
        ? { to: action.dial, from: action.callerId, command_id: expect.stringMatching(UUID) }
        : {
          to: action.dial,
          from: action.callerId,
          timeout_secs: 30,
          webhook_url: `${PUBLIC_URL}/telephony/telnyx/transfer-events?${transferQuery(action.tracked)}`,
          webhook_url_method: "POST",
          command_id: expect.stringMatching(UUID)
        }
  )
}

// ---------------------------------------------------------------------------------------------
// Transfers and their outcomes (docs/fallback.md, "Transfer outcomes")

/** The call harness's PUBLIC_URL: where callgate tells carriers to report. */
export const PUBLIC_URL = "https://callgate.test"

export interface TransferRef {
  readonly agentId: string
  readonly sessionId: string
}

const transferQuery = (ref: TransferRef) => new URLSearchParams({ agentId: ref.agentId, sessionId: ref.sessionId }).toString()

/** The tracked `<Dial>` callgate sends for a transfer, exactly (attributes in the SDK's order, `&` escaped). */
export const trackedDial = (provider: "twilio" | "telnyx", to: string, callerId: string, ref: TransferRef, timeoutSeconds = 30) => {
  const query = transferQuery(ref).replace(/&/g, "&amp;")
  return (
    `<?xml version="1.0" encoding="UTF-8"?><Response><Dial callerId="${callerId}" ` +
    `action="${PUBLIC_URL}/telephony/${provider}/transfer-outcome?${query}" method="POST" timeout="${timeoutSeconds}">` +
    `<Number statusCallback="${PUBLIC_URL}/telephony/${provider}/transfer-progress?${query}" statusCallbackMethod="POST" ` +
    `statusCallbackEvent="initiated ringing answered completed">${to}</Number></Dial></Response>`
  )
}

/** A `<Dial>` callgate wrote: tracked for its own transfers, plain for one that came in a fallback webhook's markup. */
const dialDocument = (provider: "twilio" | "telnyx", to: string, callerId: string, ref: TransferRef | undefined) =>
  ref === undefined
    ? `<?xml version="1.0" encoding="UTF-8"?><Response><Dial callerId="${callerId}">${to}</Dial></Response>`
    : trackedDial(provider, to, callerId, ref)

export type TransferOutcome = "answered" | "busy" | "no-answer" | "failed"

/** What each carrier reports for an outcome: Twilio/TeXML DialCallStatus, Telnyx hangup_cause. */
export const CARRIER_WORDS: Record<TransferOutcome, { readonly dial: string; readonly hangupCause: string }> = {
  answered: { dial: "completed", hangupCause: "normal_clearing" },
  busy: { dial: "busy", hangupCause: "user_busy" },
  "no-answer": { dial: "no-answer", hangupCause: "timeout" },
  failed: { dial: "failed", hangupCause: "unspecified" }
}

/** Posts a form to callgate as Twilio (X-Twilio-Signature over the PUBLIC_URL address) or TeXML (Ed25519) would. */
export const postCarrierForm = async (gateway: Gateway, kind: CallKind, path: string, form: Record<string, string>) => {
  const body = new URLSearchParams(form).toString()
  const headers: Record<string, string> =
    kind === "twilio" ? { "x-twilio-signature": gateway.twilio.sign(`${PUBLIC_URL}${path}`, form) } : gateway.telnyx.signWebhook(body)
  return fetch(`${gateway.httpBase}${path}`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded", ...headers }, body })
}

/** Posts a Call Control webhook of the transfer's new leg, signed as Telnyx signs it. */
export const postLegEvent = async (gateway: Gateway, ref: TransferRef, eventType: string, payload: Record<string, unknown>) => {
  const body = gateway.telnyx.callControlEvent(eventType, payload)
  return fetch(`${gateway.httpBase}/telephony/telnyx/transfer-events?${transferQuery(ref)}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...gateway.telnyx.signWebhook(body) },
    body
  })
}

/** The transfer request callgate sent for the call (the carrier's REST), once it is there. */
export const transferRequestOf = async (gateway: Gateway, call: { kind: CallKind; callId: string }) => {
  const isTransfer = (r: RecordedRequest) =>
    call.kind === "telnyx-call-control" ? decodeURIComponent(r.path).endsWith("/actions/transfer") : JSON.stringify(r.form ?? {}).includes("<Dial")
  await until(() => carrierRequestsFor(gateway, call.callId).some(isTransfer), `the transfer request of ${call.callId}`)
  return carrierRequestsFor(gateway, call.callId).find(isTransfer)!
}

/**
 * The carrier reports the transfer's outcome as it would: Twilio/TeXML the number's progress
 * (ringing, and in-progress when answered) then the `<Dial action>` with DialCallStatus (and
 * DialCallDuration); Call Control the new leg's call.initiated, call.answered and call.hangup.
 * Answers the `<Dial action>`'s response text (the caller's next TwiML), or "" for Call Control.
 */
export const reportTransferOutcome = async (
  gateway: Gateway,
  call: { kind: CallKind; callId: string },
  ref: TransferRef,
  outcome: TransferOutcome,
  options: { readonly talkSeconds?: number; readonly reportAnswer?: boolean } = {}
): Promise<string> => {
  const words = CARRIER_WORDS[outcome]
  const reportAnswer = options.reportAnswer ?? true
  if (call.kind === "telnyx-call-control") {
    const leg = { call_control_id: `v3:leg-b-${ref.sessionId}`, to: FALLBACK_NUMBER, from: AGENT_NUMBER }
    expect((await postLegEvent(gateway, ref, "call.initiated", leg)).status).toBe(200)
    if (outcome === "answered" && reportAnswer) expect((await postLegEvent(gateway, ref, "call.answered", leg)).status).toBe(200)
    expect((await postLegEvent(gateway, ref, "call.hangup", { ...leg, hangup_cause: words.hangupCause })).status).toBe(200)
    return ""
  }
  const provider = call.kind === "twilio" ? "twilio" : "telnyx"
  const query = transferQuery(ref)
  const progress = `/telephony/${provider}/transfer-progress?${query}`
  const base = { CallSid: `CA-leg-b-${ref.sessionId}`, ParentCallSid: call.callId }
  expect((await postCarrierForm(gateway, call.kind, progress, { ...base, CallStatus: "ringing" })).status).toBe(204)
  if (outcome === "answered" && reportAnswer) {
    expect((await postCarrierForm(gateway, call.kind, progress, { ...base, CallStatus: "in-progress" })).status).toBe(204)
  }
  const response = await postCarrierForm(gateway, call.kind, `/telephony/${provider}/transfer-outcome?${query}`, {
    CallSid: call.callId,
    DialCallSid: base.CallSid,
    DialCallStatus: words.dial,
    ...(outcome === "answered" ? { DialCallDuration: String(options.talkSeconds ?? 42) } : {})
  })
  expect(response.status).toBe(200)
  return response.text()
}

/** The tracked transfer request callgate sent for the call (its own transfer, not a webhook's markup), if any yet. */
export const trackedTransferOf = (gateway: Gateway, call: { kind: CallKind; callId: string }) =>
  carrierRequestsFor(gateway, call.callId).find((r) => /transfer-(outcome|events)/.test(JSON.stringify(r.form ?? r.json ?? {})))

/** Moves a fallback or agent transfer of `call` to `outcome` as its carrier would report it; answers the caller's next TwiML. */
export const completeTransfer = async (gateway: Gateway, call: { kind: CallKind; callId: string }, agentId: string, outcome: TransferOutcome = "answered") => {
  const request = await transferRequestOf(gateway, call)
  const text = call.kind === "telnyx-call-control" ? String((request.json as any)?.webhook_url) : JSON.stringify(request.form)
  const sessionId = /sessionId=([A-Za-z0-9_-]+)/.exec(text)![1]!
  return reportTransferOutcome(gateway, call, { agentId, sessionId }, outcome)
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
