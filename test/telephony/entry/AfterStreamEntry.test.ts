import { Effect, Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Environments } from "../../../src/environments/Environments.js"
import { nowIso } from "../../../src/kernel/Time.js"
import type { Session } from "../../../src/sessions/SessionSchema.js"
import { Sessions } from "../../../src/sessions/Sessions.js"
import { SessionTokens } from "../../../src/telephony/SessionTokens.js"
import { type FakeTelnyx, startFakeTelnyx } from "../../support/fakeTelnyx.js"
import { twilioSignature } from "../../support/fakeTwilio.js"
import { uniqueId } from "../../support/testApp.js"
import { sampleSession } from "../../sessions/SessionStore.contract.js"
import { type EntryTestApp, formBody, makeEntryTestApp, PUBLIC_URL, XML } from "./entryTestApp.js"

/**
 * The `<Redirect>` after the stream (docs/reliability.md): signature-checked like each carrier's
 * entry webhook; a hang-up for a session that ended; for one still active after the owner's grace,
 * one claim and the error fallback as the answer, never a carrier REST request. The app runs on the
 * TestClock: the grace passes when the test moves the clock through it, never by waiting.
 */

const AUTH_TOKEN = "twilio-test-auth-token-01"
const ACCOUNT = "AC00000000000000000000000000000042"
const HANGUP = `${XML}<Response><Hangup/></Response>`
/** How long the owner of a session whose stream ended gets to end it (recovery/AfterStream.ts, OWNER_GRACE). */
const GRACE_MS = 2000
const STEP_MS = 100

describe("POST /telephony/{twilio,telnyx}/after-stream", () => {
  let telnyx: FakeTelnyx
  let t: EntryTestApp
  beforeAll(async () => {
    telnyx = await startFakeTelnyx()
    t = await makeEntryTestApp({ TWILIO_AUTH_TOKEN: AUTH_TOKEN, TWILIO_ACCOUNT_SID: ACCOUNT, ...telnyx.env }, "memory", { clock: "test" })
  })
  afterAll(async () => {
    await t.close()
    await telnyx.close()
  })

  const run = <A, E>(effect: Effect.Effect<A, E, any>) => t.runtime.runPromise(effect as Effect.Effect<A, E, never>)
  const form = (callId: string) => ({ CallSid: callId, AccountSid: ACCOUNT, From: "+14155550100", To: "+14155550111", Direction: "inbound" })
  const path = (carrier: "twilio" | "telnyx", sessionId: string, agentId = t.agentId, environmentId = t.environmentId) =>
    `/telephony/${carrier}/after-stream?agentId=${agentId}&environmentId=${environmentId}&sessionId=${sessionId}`
  const twilioPost = (url: string, fields: Record<string, string>, signature = twilioSignature(AUTH_TOKEN, PUBLIC_URL + url, fields)) =>
    t.app.inject({
      method: "POST",
      url,
      payload: formBody(fields),
      headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": signature }
    })
  const telnyxPost = (url: string, fields: Record<string, string>, signed = true) => {
    const body = formBody(fields)
    return t.app.inject({
      method: "POST",
      url,
      payload: body,
      headers: { "content-type": "application/x-www-form-urlencoded", ...(signed ? telnyx.signWebhook(body) : {}) }
    })
  }
  const stored = (agentId: string, sessionId: string) => run(Effect.flatMap(Sessions, (s) => s.get(agentId, sessionId)))
  const storedOrNone = (agentId: string, sessionId: string) =>
    run(Effect.flatMap(Sessions, (s) => s.get(agentId, sessionId)).pipe(Effect.catchTag("SessionNotFound", () => Effect.succeed(undefined))))
  const clockNow = () => run(nowIso)

  /**
   * Moves the TestClock through the owner's grace in 100 ms steps. Until 1.9 s of it have passed,
   * `done` must stay false and `untouched` true (nothing answered, nothing claimed); past the grace
   * `done` must come true within a few more steps.
   */
  const throughGrace = async (done: () => boolean, untouched: () => Promise<boolean>) => {
    for (let elapsed = STEP_MS; elapsed < GRACE_MS; elapsed += STEP_MS) {
      await t.adjustClock(`${STEP_MS} millis`)
      expect(done(), `acted on ${elapsed} ms into the grace`).toBe(false)
      expect(await untouched(), `claimed ${elapsed} ms into the grace`).toBe(true)
    }
    for (let extra = 0; !done(); extra++) {
      if (extra === 10) throw new Error("nothing happened 1 s past the owner's grace")
      await t.adjustClock(`${STEP_MS} millis`)
    }
  }
  /** `pending` through the grace: its answer, which must not come before the grace is over. */
  const answeredAfterGrace = async <A>(pending: Promise<A>, untouched: () => Promise<boolean>): Promise<A> => {
    let settled = false
    const watched = pending.finally(() => {
      settled = true
    })
    await throughGrace(() => settled, untouched)
    return watched
  }
  const stillActive = (agentId: string, sessionId: string) => async () => (await stored(agentId, sessionId)).status === "active"

  it("refuses a bad signature (401) and a malformed query (400), as the entry webhooks do", async () => {
    const sessionId = uniqueId("ses")
    expect((await twilioPost(path("twilio", sessionId), form("CA1"), "Zm9yZ2Vk")).statusCode).toBe(401)
    expect((await telnyxPost(path("telnyx", sessionId), form("v3:1"), false)).statusCode).toBe(401)
    const bad = `/telephony/twilio/after-stream?agentId=${t.agentId}&environmentId=${t.environmentId}&sessionId=no%20such`
    expect((await twilioPost(bad, form("CA1"))).statusCode).toBe(400)
  })

  it("a session that ended: a plain hang-up, the record untouched", async () => {
    const session = sampleSession(t.agentId, { environmentId: t.environmentId, status: "completed", endReason: "caller_hangup", endedAt: new Date().toISOString() })
    await run(Effect.flatMap(Sessions, (s) => s.record(session)))
    const res = await twilioPost(path("twilio", session.id), form(session.callId))
    expect(res.statusCode).toBe(200)
    expect(res.body).toBe(HANGUP)
    expect(await stored(t.agentId, session.id)).toEqual(session)
  })

  it("a TeXML session left active: claimed once, the fallback (disabled: a hang-up) is the answer, failed / instance_lost", async () => {
    const session = sampleSession(t.agentId, { environmentId: t.environmentId, provider: "telnyx", callKind: "telnyx-texml", callId: "v3:texml-left" })
    await run(Effect.flatMap(Sessions, (s) => s.record(session)))
    const [first, second] = await answeredAfterGrace(
      Promise.all([telnyxPost(path("telnyx", session.id), form(session.callId)), telnyxPost(path("telnyx", session.id), form(session.callId))]),
      stillActive(t.agentId, session.id)
    )
    expect([first!.body, second!.body]).toEqual([HANGUP, HANGUP])
    expect(await stored(t.agentId, session.id)).toMatchObject({
      status: "failed",
      endReason: "instance_lost",
      fallback: { trigger: "instance_lost", type: "disabled", outcome: "hung_up" }
    })
    // The answer was the rescue: nothing went to the carrier's REST API.
    expect(telnyx.requests).toEqual([])
  })

  it("a Twilio session left active with a phone fallback, the redirect twice at once: one <Dial>, one hang-up", async () => {
    const agentId = uniqueId("agent")
    const environment = await run(
      Effect.flatMap(Environments, (envs) => envs.create(agentId, { name: "phone", errorFallbackType: "phone", errorFallbackValue: "+14155550123" }))
    )
    const session = sampleSession(agentId, { environmentId: environment.id, callKind: "twilio" })
    await run(Effect.flatMap(Sessions, (s) => s.record(session)))
    const answers = await answeredAfterGrace(
      Promise.all([0, 1].map(() => twilioPost(path("twilio", session.id, agentId, environment.id), form(session.callId)))),
      stillActive(agentId, session.id)
    )
    expect(answers.map((res) => res.body).sort()).toEqual([
      `${XML}<Response><Dial callerId="+14155550111">+14155550123</Dial></Response>`,
      HANGUP
    ])
    expect(await stored(agentId, session.id)).toMatchObject({
      status: "failed",
      endReason: "instance_lost",
      fallback: { type: "phone", outcome: "transferred" }
    })
  })

  it("Call Control streaming.stopped: nothing for a session that ended or a foreign client_state; one left active is claimed once and rescued through REST", async () => {
    const callControl = `/telephony/telnyx/call-control?agentId=${t.agentId}&environmentId=${t.environmentId}`
    const stopped = (callId: string, clientState: string) => {
      const body = telnyx.callControlEvent("streaming.stopped", {
        call_control_id: callId,
        connection_id: "1684641123236054244",
        client_state: clientState,
        stream_url: "wss://callgate.test/telephony/telnyx/stream?token=x"
      })
      return t.app.inject({ method: "POST", url: callControl, payload: body, headers: { "content-type": "application/json", ...telnyx.signWebhook(body) } })
    }
    const clientState = (sessionId: string) => Buffer.from(sessionId).toString("base64")
    const ended = sampleSession(t.agentId, {
      environmentId: t.environmentId,
      provider: "telnyx",
      callKind: "telnyx-call-control",
      callId: "v3:cc-ended",
      status: "completed",
      endReason: "caller_hangup",
      endedAt: new Date().toISOString()
    })
    const left = sampleSession(t.agentId, { environmentId: t.environmentId, provider: "telnyx", callKind: "telnyx-call-control", callId: "v3:cc-left" })
    await run(Effect.flatMap(Sessions, (s) => Effect.zipRight(s.record(ended), s.record(left))))

    expect((await stopped(ended.callId, clientState(ended.id))).json()).toEqual({ received: true })
    expect((await stopped("v3:cc-foreign", Buffer.from("someone else's state").toString("base64"))).json()).toEqual({ received: true })
    // Telnyx may send it twice (a retry, streaming.failed): acknowledged at once each time, rescued once.
    const twice = await Promise.all([stopped(left.callId, clientState(left.id)), stopped(left.callId, clientState(left.id))])
    expect(twice.map((res) => res.statusCode)).toEqual([200, 200])
    await throughGrace(() => telnyx.commands(left.callId, "hangup").length > 0, stillActive(t.agentId, left.id))
    // The rescue is recorded on the session once the carrier answered it.
    let record = await stored(t.agentId, left.id)
    for (let tries = 0; record.fallback === null && tries < 200; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 50))
      record = await stored(t.agentId, left.id)
    }
    expect(record).toMatchObject({
      status: "failed",
      endReason: "instance_lost",
      fallback: { trigger: "instance_lost", type: "disabled", outcome: "hung_up" }
    })
    // The environment's fallback (disabled: a hang-up) went through the REST API, once; the
    // session that had ended and the foreign call got nothing (their events came first).
    expect(telnyx.commands(left.callId).map((r) => r.path)).toEqual([`/v2/calls/${left.callId}/actions/hangup`])
    expect(telnyx.commands(ended.callId)).toEqual([])
    expect(telnyx.commands("v3:cc-foreign")).toEqual([])
    expect(await stored(t.agentId, ended.id)).toEqual(ended)
  })

  it("Call Control streaming.stopped of a call an agent failover moved: the old stream's stop rescues nothing; while the move is in flight it waits for the other instance, and rescues only a move that never arrived", async () => {
    const callControl = `/telephony/telnyx/call-control?agentId=${t.agentId}&environmentId=${t.environmentId}`
    const clientState = (sessionId: string) => Buffer.from(sessionId).toString("base64")
    /** A stream URL as callgate hands it to Telnyx, with its own session token; and that token's id (the stream's reference). */
    const stream = (callId: string) =>
      run(
        Effect.map(SessionTokens, (tokens) => {
          const token = tokens.issue({ agentId: t.agentId, environmentId: t.environmentId, kind: "telnyx-call-control", callId })
          return { url: `wss://callgate.test/telephony/telnyx/stream?token=${encodeURIComponent(token)}`, ref: Option.getOrThrow(tokens.referenceOf(token)) }
        })
      )
    const stopped = (callId: string, sessionId: string, streamUrl: string) => {
      const body = telnyx.callControlEvent("streaming.stopped", {
        call_control_id: callId,
        connection_id: "1684641123236054244",
        client_state: clientState(sessionId),
        stream_url: streamUrl
      })
      return t.app.inject({ method: "POST", url: callControl, payload: body, headers: { "content-type": "application/json", ...telnyx.signWebhook(body) } })
    }
    const session = (callId: string, overrides: Partial<Session>) =>
      sampleSession(t.agentId, { environmentId: t.environmentId, provider: "telnyx", callKind: "telnyx-call-control", callId, instanceId: "xfail-a", ...overrides })

    // Moved: instance B took the session (its stream is the record's); A's old stream stops.
    const [movedOld, movedNew] = [await stream("v3:cc-moved"), await stream("v3:cc-moved")]
    const moved = session("v3:cc-moved", { instanceId: "xfail-b", streamRef: movedNew.ref })
    // In flight: A marked the move (the record still names A's stream); one arrives on B during the owner's grace, one never does.
    const [arrivingOld, arrivingNew] = [await stream("v3:cc-arriving"), await stream("v3:cc-arriving")]
    const arriving = session("v3:cc-arriving", { streamRef: arrivingOld.ref, streamMovingTo: "xfail-b" })
    const lostOld = await stream("v3:cc-lost")
    const lost = session("v3:cc-lost", { streamRef: lostOld.ref, streamMovingTo: "xfail-b" })
    // Its own stream stopped and no one ends it: abandoned, as before (the control).
    const leftStream = await stream("v3:cc-left-own")
    const left = session("v3:cc-left-own", { streamRef: leftStream.ref })
    await run(Effect.flatMap(Sessions, (s) => Effect.forEach([moved, arriving, lost, left], (one) => s.record(one))))

    for (const [one, url] of [
      [moved, movedOld.url],
      [arriving, arrivingOld.url],
      [lost, lostOld.url],
      [left, leftStream.url]
    ] as const) {
      expect((await stopped(one.callId, one.id, url)).json()).toEqual({ received: true })
    }
    // Through the owner's grace nothing is claimed; past it, only the session whose own stream stopped is rescued.
    await throughGrace(() => telnyx.commands(left.callId, "hangup").length > 0, async () => (await Promise.all([moved, arriving, lost, left].map((one) => stillActive(t.agentId, one.id)()))).every(Boolean))
    expect(await stored(t.agentId, moved.id)).toEqual(moved)
    // B takes the arriving session (CallSettlement.adopt): the record names B's stream, the mark is gone.
    const { streamMovingTo: _moving, ...adopted } = { ...arriving, instanceId: "xfail-b", streamRef: arrivingNew.ref }
    await run(Effect.flatMap(Sessions, (s) => s.record(adopted)))
    // Up to the move's grace (10 s from the stop): the session that never arrived is rescued then, once.
    for (let extra = 0; telnyx.commands(lost.callId, "hangup").length === 0; extra++) {
      if (extra === 100) throw new Error("the move that never arrived was not rescued 10 s after its old stream stopped")
      await t.adjustClock(`${STEP_MS} millis`)
    }
    expect(await stored(t.agentId, lost.id)).toMatchObject({ status: "failed", endReason: "instance_lost" })
    // The moved and the arrived sessions: no claim, no carrier request, the records as their instance wrote them.
    expect(await stored(t.agentId, moved.id)).toEqual(moved)
    expect(await stored(t.agentId, arriving.id)).toEqual(adopted)
    expect(telnyx.commands(moved.callId)).toEqual([])
    expect(telnyx.commands(arriving.callId)).toEqual([])
    expect(telnyx.commands(lost.callId).map((r) => r.path)).toEqual([`/v2/calls/${lost.callId}/actions/hangup`])
  })

  it("no record at all (the instance died before writing the start): the fallback answers and a terminal record is written", async () => {
    const sessionId = uniqueId("ses")
    // No record through the grace either: the owner may yet write one.
    const res = await answeredAfterGrace(twilioPost(path("twilio", sessionId), form("CAnorecord")), async () => (await storedOrNone(t.agentId, sessionId)) === undefined)
    expect(res.body).toBe(HANGUP)
    const now = await clockNow()
    expect(await stored(t.agentId, sessionId)).toMatchObject({
      id: sessionId,
      callId: "CAnorecord",
      status: "failed",
      endReason: "instance_lost",
      callKind: "twilio",
      createdAt: now,
      endedAt: now,
      fallback: { trigger: "instance_lost", outcome: "hung_up" }
    })
  })
})
