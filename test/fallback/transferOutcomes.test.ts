import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { dialInAgent, type Gateway, startGateway, telnyxCall, twilioCall, until } from "../livecall/callHarness.js"
import { ADMIN_KEY } from "../support/testApp.js"
import { CA_FILE } from "../webhooks/httpsReceiver.js"
import {
  AGENT_NUMBER,
  api,
  CALL_KINDS,
  carrierRequestsFor,
  createEnvironment,
  endedEventsFor,
  expectCarrierRequest,
  FALLBACK_NUMBER,
  fallbackGatewayEnv,
  getSession,
  placeCall,
  reportTransferOutcome,
  trackedDial,
  type TransferOutcome,
  transferRequestOf,
  waitForEnded
} from "./liveCalls.js"

/**
 * Transfer outcomes (docs/fallback.md, "Transfer outcomes") on the production wiring: a live call's
 * agent drops, the phone fallback transfers the caller with the carrier's verification (tracked
 * `<Dial>`, or a Call Control transfer with the new leg's webhooks), and the carrier's reports are
 * posted to callgate's signed routes as Twilio, TeXML and Telnyx post them. Each outcome is recorded
 * exactly on the session and in its one session.ended, which is queued only once the outcome came.
 */

const SORRY = "Sorry, nobody could take your call. Goodbye."
const XML = '<?xml version="1.0" encoding="UTF-8"?>'
const OUTCOMES: ReadonlyArray<TransferOutcome> = ["answered", "busy", "no-answer", "failed"]

/** The session as /v1 shows it, once `predicate` holds. */
const sessionWhere = async (gateway: Gateway, agentId: string, sessionId: string, predicate: (session: any) => boolean) => {
  const deadline = Date.now() + 30_000
  for (;;) {
    const session = await getSession(gateway, agentId, sessionId)
    if (predicate(session)) return session
    if (Date.now() > deadline) throw new Error(`timed out waiting for session ${sessionId}: ${JSON.stringify(session)}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

describe.each(CALL_KINDS)("transfer outcomes: %s calls", (kind) => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: fallbackGatewayEnv(CA_FILE) })
  })
  afterAll(() => gateway.close())

  it.each(OUTCOMES)("phone fallback transfer %s: recorded exactly, session.ended after it, exactly one", async (outcome) => {
    const env = await createEnvironment(gateway, {
      errorFallbackType: "phone",
      errorFallbackValue: FALLBACK_NUMBER,
      transferFailedMessage: SORRY
    })
    const call = await placeCall(gateway, env, kind)
    call.agent!.close()

    // The transfer carries the carrier's verification; the session is ended and its transfer pending.
    const transfer = await transferRequestOf(gateway, call)
    const sessionId = call.agent!.events("start")[0]!.start.customParameters.sessionId as string
    const ref = { agentId: env.agentId, sessionId }
    expectCarrierRequest(gateway, call, transfer, { dial: FALLBACK_NUMBER, callerId: AGENT_NUMBER, tracked: ref })
    await sessionWhere(gateway, env.agentId, sessionId, (s) => s.status === "failed" && s.pendingTransfer !== undefined)
    // The end is written with the transfer pending, so it queued no session.ended: that waits for the outcome.
    expect(endedEventsFor(gateway, call.callId)).toHaveLength(0)

    const started = Date.now()
    // Twilio and TeXML: no answer report, so the talk time is the carrier's DialCallDuration. Telnyx
    // always reports the new leg's call.answered (its hang-up says nothing of an answer).
    const reportAnswer = kind === "telnyx-call-control"
    const answer = await reportTransferOutcome(gateway, call, ref, outcome, { reportAnswer, talkSeconds: 42 })
    // A second report of the same outcome (carriers retry) changes nothing.
    const again = await reportTransferOutcome(gateway, call, ref, outcome, { reportAnswer, talkSeconds: 42 })

    const ended = await waitForEnded(gateway, call.callId)
    expect(endedEventsFor(gateway, call.callId)).toHaveLength(1)
    const expected = {
      to: FALLBACK_NUMBER,
      initiatedBy: "fallback",
      status: outcome,
      carrierStatus: kind === "telnyx-call-control"
        ? { answered: "normal_clearing", busy: "user_busy", "no-answer": "timeout", failed: "unspecified" }[outcome]
        : { answered: "completed", busy: "busy", "no-answer": "no-answer", failed: "failed" }[outcome],
      transferFailedMessage: outcome !== "answered"
    }
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_disconnected", transfers: [expected] })
    const [record] = ended.transfers!
    if (outcome === "answered" && kind !== "telnyx-call-control") {
      // No answer report came: the talk time is the carrier's DialCallDuration.
      expect(record!.talkMs).toBe(42_000)
    } else {
      if (outcome !== "answered") expect(record!.talkMs).toBe(0)
      expect(record!.ringMs + record!.talkMs).toBe(Date.parse(record!.endedAt) - Date.parse(record!.startedAt))
    }
    expect(Date.parse(record!.endedAt)).toBeGreaterThanOrEqual(Date.parse(record!.startedAt))
    expect(Date.parse(record!.endedAt)).toBeLessThanOrEqual(Date.now())
    expect(Date.parse(record!.endedAt)).toBeGreaterThanOrEqual(started - 1000)

    // /v1 shows the same, with nothing pending.
    const session = await getSession(gateway, env.agentId, sessionId)
    expect(session.transfers).toEqual(ended.transfers)
    expect(session.pendingTransfer).toBeUndefined()
    expect(session.fallback).toMatchObject({ type: "phone", outcome: "transferred" })

    // What the caller hears after the transfer.
    if (kind === "telnyx-call-control") {
      // Telnyx keeps the caller's leg when the transfer fails: the message is spoken, then it is hung up.
      const action = outcome === "answered" ? "hangup" : "speak"
      await until(() => gateway.telnyx.commands(call.callId, action).length > 0, `the ${action} command`)
      if (outcome !== "answered") expect(gateway.telnyx.commands(call.callId, "speak")[0]!.json).toMatchObject({ payload: SORRY })
    } else {
      const expectedTwiml = outcome === "answered" ? `${XML}<Response><Hangup/></Response>` : `${XML}<Response><Say>${SORRY}</Say><Hangup/></Response>`
      expect(answer).toBe(expectedTwiml)
      expect(again).toBe(outcome === "answered" ? expectedTwiml : `${XML}<Response><Hangup/></Response>`)
    }
  })

  it("an answered transfer with the answer reported: ring time to the answer, talk time after it", async () => {
    const env = await createEnvironment(gateway, { errorFallbackType: "phone", errorFallbackValue: FALLBACK_NUMBER })
    const call = await placeCall(gateway, env, kind)
    call.agent!.close()
    await transferRequestOf(gateway, call)
    const sessionId = call.agent!.events("start")[0]!.start.customParameters.sessionId as string
    await reportTransferOutcome(gateway, call, { agentId: env.agentId, sessionId }, "answered")
    const ended = await waitForEnded(gateway, call.callId)
    const [record] = ended.transfers!
    expect(record).toMatchObject({ status: "answered", initiatedBy: "fallback", transferFailedMessage: false })
    expect(record!.ringMs + record!.talkMs).toBe(Date.parse(record!.endedAt) - Date.parse(record!.startedAt))
  })

  it("reports with a bad signature are refused and change nothing", async () => {
    const env = await createEnvironment(gateway, { errorFallbackType: "phone", errorFallbackValue: FALLBACK_NUMBER })
    const call = await placeCall(gateway, env, kind)
    call.agent!.close()
    await transferRequestOf(gateway, call)
    const sessionId = call.agent!.events("start")[0]!.start.customParameters.sessionId as string
    const query = new URLSearchParams({ agentId: env.agentId, sessionId }).toString()
    const path =
      kind === "telnyx-call-control"
        ? `/telephony/telnyx/transfer-events?${query}`
        : `/telephony/${kind === "twilio" ? "twilio" : "telnyx"}/transfer-outcome?${query}`
    const forged = await fetch(`${gateway.httpBase}${path}`, {
      method: "POST",
      headers:
        kind === "telnyx-call-control"
          ? { "content-type": "application/json", "telnyx-signature-ed25519": "AAAA", "telnyx-timestamp": String(Math.floor(Date.now() / 1000)) }
          : { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": "forged", "telnyx-signature-ed25519": "AAAA", "telnyx-timestamp": "1" },
      body: kind === "telnyx-call-control" ? gateway.telnyx.callControlEvent("call.hangup", { call_control_id: "v3:x", hangup_cause: "user_busy" }) : "DialCallStatus=busy"
    })
    expect(forged.status).toBe(401)
    const session = await getSession(gateway, env.agentId, sessionId)
    expect(session.pendingTransfer).toMatchObject({ to: FALLBACK_NUMBER, initiatedBy: "fallback", answeredAt: null })
    expect(session.transfers ?? []).toEqual([])
    // The real report then settles it.
    await reportTransferOutcome(gateway, call, { agentId: env.agentId, sessionId }, "busy")
    expect((await waitForEnded(gateway, call.callId)).transfers).toMatchObject([{ status: "busy" }])
  })

  it("transferFailedMessage is an environment field: PATCH sets and clears it, bad values are refused", async () => {
    const env = await createEnvironment(gateway, {})
    const path = `/v1/agents/${env.agentId}/environments/${env.environmentId}`
    expect((await api(gateway, "GET", path)).transferFailedMessage).toBeNull()
    expect((await api(gateway, "PATCH", path, { transferFailedMessage: SORRY })).transferFailedMessage).toBe(SORRY)
    expect((await api(gateway, "PATCH", path, { transferFailedMessage: null })).transferFailedMessage).toBeNull()
    for (const bad of ["", "x".repeat(1001), 42]) {
      const res = await fetch(`${gateway.httpBase}${path}`, {
        method: "PATCH",
        headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ transferFailedMessage: bad })
      })
      expect(res.status).toBe(400)
      expect(JSON.stringify(await res.json())).toContain("transferFailedMessage")
    }
  })
})

/**
 * The return path (docs/fallback.md, "The return path"): an agent's transfer is not answered; the
 * caller is put back on a stream to an idle dial-in agent of the environment (the same session,
 * `start` with `resumed`, `resume` with previousEndReason transfer_failed and the transfer), or,
 * with none idle, gets the environment's error fallback. Twilio and TeXML: in the answer to the
 * `<Dial action>`; Call Control: commands on the caller's leg, which Telnyx keeps when the new leg
 * hangs up unanswered (`streaming_start`, or the fallback's own). Either way the session ends once,
 * with one session.ended listing the transfers.
 */
describe.each(["twilio", "telnyx-texml", "telnyx-call-control"] as const)("the return path: %s calls", (kind) => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: fallbackGatewayEnv(CA_FILE) })
  })
  afterAll(() => gateway.close())

  const OTHER_NUMBER = "+14155550777"

  /** A live call whose agent transferred it to FALLBACK_NUMBER; resolves once the session ended with the transfer pending. */
  const transferredCall = async (env: Awaited<ReturnType<typeof createEnvironment>>, format: Parameters<typeof placeCall>[4] = {}) => {
    const call = await placeCall(gateway, env, kind, true, format)
    const sessionId = call.agent!.events("start")[0]!.start.customParameters.sessionId as string
    call.agent!.send({ event: "transfer", transfer: { to: FALLBACK_NUMBER } })
    await transferRequestOf(gateway, call)
    await sessionWhere(gateway, env.agentId, sessionId, (s) => s.status === "completed" && s.pendingTransfer !== undefined)
    await call.carrier.peer.waitClosed()
    return { call, ref: { agentId: env.agentId, sessionId } }
  }

  /** Where the caller is streamed back to: the `<Dial action>`'s answer, or Call Control's `streaming_start` on the caller's leg. */
  const streamBack = async (call: { callId: string }, answer: string) => {
    if (kind !== "telnyx-call-control") {
      const streamUrl = /<Stream url="([^"]+)"/.exec(answer)?.[1]
      expect(streamUrl, answer).toBeDefined()
      const token =
        kind === "twilio" ? /<Parameter name="token" value="([^"]+)"/.exec(answer)?.[1] : new URL(streamUrl!).searchParams.get("token") ?? undefined
      return { streamUrl: streamUrl!, token: token! }
    }
    expect(answer).toBe("")
    await until(() => gateway.telnyx.commands(call.callId, "streaming_start").length > 0, "the streaming_start on the caller's leg")
    const [started, ...more] = gateway.telnyx.commands(call.callId, "streaming_start")
    expect(more).toHaveLength(0)
    const json = started!.json as { stream_url: string; stream_auth_token: string; stream_bidirectional_mode: string }
    expect(json.stream_bidirectional_mode).toBe("rtp")
    expect(new URL(json.stream_url).searchParams.get("token")).toBe(json.stream_auth_token)
    return { streamUrl: json.stream_url, token: json.stream_auth_token }
  }

  it("not answered, another agent idle: the caller is back on it (resumed, the reason in resume), the call goes on, one session.ended lists the transfer", async () => {
    const env = await createEnvironment(gateway, { errorFallbackType: "phone", errorFallbackValue: OTHER_NUMBER })
    const { call, ref } = await transferredCall(env)
    const second = await dialInAgent(gateway, env.agentId, env.environmentId)
    await until(() => gateway.idleAgents(env.agentId, env.environmentId) === 1, "the second agent to be idle")

    const answer = await reportTransferOutcome(gateway, call, ref, "no-answer")
    // A stream back to this instance, with its own single-use token; no fallback ran.
    const { streamUrl, token } = await streamBack(call, answer)
    expect(token).toBeTruthy()
    expect(new URL(streamUrl).pathname).toBe(kind === "twilio" ? "/telephony/twilio/stream" : "/telephony/telnyx/stream")
    expect(answer).not.toContain(OTHER_NUMBER)
    expect(carrierRequestsFor(gateway, call.callId).some((r) => JSON.stringify(r.form ?? r.json).includes(OTHER_NUMBER))).toBe(false)
    // Back to active with the failed transfer recorded; no session.ended yet.
    const reopened = await getSession(gateway, env.agentId, ref.sessionId)
    expect(reopened).toMatchObject({ status: "active", endedAt: null, transfers: [{ to: FALLBACK_NUMBER, initiatedBy: "agent", status: "no-answer" }] })
    expect(endedEventsFor(gateway, call.callId)).toHaveLength(0)

    // The carrier opens the stream the answer names.
    const carrier =
      kind === "twilio"
        ? await twilioCall(gateway, { token, callSid: call.callId })
        : await telnyxCall(gateway, {
            token,
            callControlId: kind === "telnyx-call-control" ? call.callId : `v3:back-${ref.sessionId}`,
            headers: { authorization: `Bearer ${token}` }
          })
    carrier.start()
    await second.waitForEvent("resume")
    expect(second.received.map((m) => m.event).slice(0, 3)).toEqual(["connected", "start", "resume"])
    const start = second.events("start")[0]!.start
    expect(start.customParameters).toMatchObject({ sessionId: ref.sessionId, resumed: "true" })
    expect(start.customParameters.failover).toBeUndefined()
    const resume = second.events("resume")[0]!.resume
    expect(resume).toMatchObject({ previousEndReason: "transfer_failed", transfer: { to: FALLBACK_NUMBER, status: "no-answer" } })
    expect(Array.isArray(resume.turns)).toBe(true)

    // The call goes on: the new agent's audio reaches the caller, then the caller hangs up.
    const voice = Buffer.alloc(160, 0x55).toString("base64")
    second.send({ event: "media", streamSid: start.streamSid, media: { payload: voice } })
    await until(() => carrier.sentMedia().includes(voice), "the new agent's audio at the carrier")
    expect(endedEventsFor(gateway, call.callId)).toHaveLength(0)
    carrier.stop()

    const ended = await waitForEnded(gateway, call.callId)
    expect(ended).toMatchObject({
      sessionId: ref.sessionId,
      status: "completed",
      endReason: "caller_hangup",
      transfers: [{ to: FALLBACK_NUMBER, initiatedBy: "agent", status: "no-answer", talkMs: 0, transferFailedMessage: false }]
    })
    const session = await sessionWhere(gateway, env.agentId, ref.sessionId, (s) => s.status === "completed")
    expect(session).toMatchObject({ endReason: "caller_hangup", fallback: null })
    expect(session.transfers).toEqual(ended.transfers)
    expect(endedEventsFor(gateway, call.callId)).toHaveLength(1)
  })

  it.runIf(kind === "telnyx-texml")(
    "not answered, another agent idle: the stream back asks Telnyx for the environment's telnyxStreamCodec (L16 16 kHz)",
    async () => {
      const env = await createEnvironment(gateway, { errorFallbackType: "phone", errorFallbackValue: OTHER_NUMBER, telnyxStreamCodec: "L16;rate=16000" })
      const { call, ref } = await transferredCall(env, { encoding: "L16", sampleRate: 16000 })
      const second = await dialInAgent(gateway, env.agentId, env.environmentId)
      await until(() => gateway.idleAgents(env.agentId, env.environmentId) === 1, "the second agent to be idle")
      const answer = await reportTransferOutcome(gateway, call, ref, "no-answer")
      expect(answer).toContain('bidirectionalMode="rtp" codec="L16" bidirectionalCodec="L16" bidirectionalSamplingRate="16000"/>')
      const token = new URL(/<Stream url="([^"]+)"/.exec(answer)![1]!.replace(/&amp;/g, "&")).searchParams.get("token")!
      const carrier = await telnyxCall(gateway, { token, callControlId: `v3:back-${ref.sessionId}`, headers: { authorization: `Bearer ${token}` }, encoding: "L16", sampleRate: 16000 })
      carrier.start()
      await second.waitForEvent("resume")
      expect(second.events("start")[0]!.start.mediaFormat).toEqual({ encoding: "audio/L16", sampleRate: 16000, channels: 1 })
      carrier.stop()
      await waitForEnded(gateway, call.callId)
    }
  )

  it("not answered, no agent idle: the answer is the environment's error fallback, the session ends failed transfer_failed with both transfers", async () => {
    const env = await createEnvironment(gateway, { errorFallbackType: "phone", errorFallbackValue: OTHER_NUMBER })
    const { call, ref } = await transferredCall(env)
    expect(gateway.idleAgents(env.agentId, env.environmentId)).toBe(0)

    const answer = await reportTransferOutcome(gateway, call, ref, "busy")
    if (kind === "telnyx-call-control") {
      // The phone fallback's own transfer command on the caller's leg, tracked like any other.
      await until(() => gateway.telnyx.commands(call.callId, "transfer").length === 2, "the fallback's transfer command")
      const fallbackTransfer = gateway.telnyx.commands(call.callId, "transfer")[1]!.json as { to: string; webhook_url: string }
      expect(fallbackTransfer.to).toBe(OTHER_NUMBER)
      expect(fallbackTransfer.webhook_url).toContain(`sessionId=${ref.sessionId}`)
      expect(gateway.telnyx.commands(call.callId, "streaming_start")).toHaveLength(0)
    } else {
      // The phone fallback, tracked like any transfer of callgate's, in the answer itself.
      expect(answer).toBe(trackedDial(kind === "twilio" ? "twilio" : "telnyx", OTHER_NUMBER, AGENT_NUMBER, ref))
    }
    const failed = await sessionWhere(gateway, env.agentId, ref.sessionId, (s) => s.status === "failed")
    expect(failed).toMatchObject({
      endReason: "transfer_failed",
      fallback: { type: "phone", outcome: "transferred", via: kind === "telnyx-call-control" ? "rest" : "redirect" },
      pendingTransfer: { to: OTHER_NUMBER, initiatedBy: "fallback" },
      transfers: [{ to: FALLBACK_NUMBER, initiatedBy: "agent", status: "busy" }]
    })
    // session.ended waits for the fallback transfer's outcome.
    expect(endedEventsFor(gateway, call.callId)).toHaveLength(0)
    await reportTransferOutcome(gateway, call, ref, "answered")
    const ended = await waitForEnded(gateway, call.callId)
    expect(ended).toMatchObject({
      status: "failed",
      endReason: "transfer_failed",
      transfers: [
        { to: FALLBACK_NUMBER, initiatedBy: "agent", status: "busy" },
        { to: OTHER_NUMBER, initiatedBy: "fallback", status: "answered" }
      ]
    })
    expect(endedEventsFor(gateway, call.callId)).toHaveLength(1)
  })

  // Twilio and TeXML send callgate no call status: their return path's deadline ends such a session (test/sessions/TransferOutcomes.test.ts).
  if (kind === "telnyx-call-control")
    it("not answered, the caller hangs up before the stream back opens: the caller's call.hangup ends the session completed / caller_hangup, one session.ended",
    async () => {
      const env = await createEnvironment(gateway, { errorFallbackType: "phone", errorFallbackValue: OTHER_NUMBER })
      const { call, ref } = await transferredCall(env)
      await dialInAgent(gateway, env.agentId, env.environmentId)
      await until(() => gateway.idleAgents(env.agentId, env.environmentId) === 1, "the second agent to be idle")
      await streamBack(call, await reportTransferOutcome(gateway, call, ref, "no-answer"))
      expect(await getSession(gateway, env.agentId, ref.sessionId)).toMatchObject({ status: "active", awaitingStreamUntil: expect.any(String) })
      // The caller's leg hangs up: Telnyx posts call.hangup (with the session's client_state) to the Call Control webhook.
      const body = gateway.telnyx.callControlEvent("call.hangup", {
        call_control_id: call.callId,
        hangup_cause: "normal_clearing",
        client_state: Buffer.from(ref.sessionId).toString("base64")
      })
      const posted = await fetch(`${gateway.httpBase}/telephony/telnyx/call-control?agentId=${env.agentId}&environmentId=${env.environmentId}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...gateway.telnyx.signWebhook(body) },
        body
      })
      expect(posted.status).toBe(200)
      const ended = await waitForEnded(gateway, call.callId)
      expect(ended).toMatchObject({
        status: "completed",
        endReason: "caller_hangup",
        transfers: [{ to: FALLBACK_NUMBER, initiatedBy: "agent", status: "no-answer" }]
      })
      const session = await getSession(gateway, env.agentId, ref.sessionId)
      expect(session.awaitingStreamUntil).toBeUndefined()
      expect(endedEventsFor(gateway, call.callId)).toHaveLength(1)
    })
})
