import { Effect, Queue } from "effect"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { Environments } from "../../../src/environments/Environments.js"
import type { TelnyxStreamCodec } from "../../../src/kernel/TelnyxStreamCodec.js"
import { CarrierCallEvent, CarrierCallEvents } from "../../../src/livecall/CarrierCallEvents.js"
import { type FakeTelnyx, startFakeTelnyx } from "../../support/fakeTelnyx.js"
import { type EntryTestApp, formBody, makeEntryTestApp, tokenIn, XML } from "./entryTestApp.js"

const ACCOUNT = "f5586561-8ff0-4291-a0ac-84fe544797bd"

/** Each telnyxStreamCodec with the codec and sampling rate Telnyx is asked for. */
const CODECS = [
  ["PCMU", "PCMU", 8000],
  ["PCMA", "PCMA", 8000],
  ["L16;rate=8000", "L16", 8000],
  ["L16;rate=16000", "L16", 16000],
  ["G722", "G722", 16000]
] as const

describe("Telnyx entry endpoints", () => {
  let telnyx: FakeTelnyx
  let t: EntryTestApp
  beforeAll(async () => {
    telnyx = await startFakeTelnyx()
    t = await makeEntryTestApp({ ...telnyx.env, CARRIER_REQUEST_TIMEOUT: "500ms" })
  })
  afterEach(() => telnyx.reset())
  afterAll(async () => {
    await t.close()
    await telnyx.close()
  })

  describe("POST /telephony/telnyx/texml", () => {
    const texmlForm = (overrides: Record<string, string> = {}) => ({
      CallSid: "v3:texml-call-1",
      AccountSid: ACCOUNT,
      From: "+14155550100",
      To: "+14155550111",
      Direction: "inbound",
      CallStatus: "ringing",
      ConnectionId: "1684641123236054244",
      ...overrides
    })
    const post = (url: string, form: Record<string, string>, headers: (body: string) => Record<string, string>) => {
      const body = formBody(form)
      return t.app.inject({ method: "POST", url, payload: body, headers: { "content-type": "application/x-www-form-urlencoded", ...headers(body) } })
    }
    const path = () => `/telephony/telnyx/texml?agentId=${t.agentId}&environmentId=${t.environmentId}`

    it("answers <Connect><Stream> with bidirectional RTP, PCMU and the session token in the URL", async () => {
      const res = await post(path(), texmlForm(), (body) => telnyx.signWebhook(body))
      expect(res.statusCode).toBe(200)
      expect(res.headers["content-type"]).toBe("text/xml; charset=utf-8")
      const token = tokenIn(res.body)
      const sessionId = (await t.claimsOf(token))?.entrySessionId
      expect(sessionId).toMatch(/^ses_[A-Za-z0-9_-]{16}$/)
      expect(res.body).toBe(
        `${XML}<Response><Connect><Stream url="wss://callgate.test/telephony/telnyx/stream?token=${encodeURIComponent(token)}" ` +
          `bidirectionalMode="rtp" codec="PCMU" bidirectionalCodec="PCMU" bidirectionalSamplingRate="8000"/></Connect>` +
          `<Redirect method="POST">https://callgate.test/telephony/telnyx/after-stream?agentId=${t.agentId}&amp;environmentId=${t.environmentId}&amp;sessionId=${sessionId}</Redirect>` +
          `</Response>`
      )
      expect(await t.claimsOf(token)).toMatchObject({
        agentId: t.agentId,
        environmentId: t.environmentId,
        kind: "telnyx-texml",
        callId: "v3:texml-call-1",
        from: "+14155550100",
        to: "+14155550111",
        direction: "inbound",
        accountSid: ACCOUNT
      })
    })

    it.each(CODECS)("an environment's telnyxStreamCodec %s is asked for both ways in the <Stream>", async (codec, telnyxCodec, rate) => {
      const environmentId = await environmentWith(codec)
      const res = await post(`/telephony/telnyx/texml?agentId=${t.agentId}&environmentId=${environmentId}`, texmlForm(), (body) => telnyx.signWebhook(body))
      expect(res.statusCode).toBe(200)
      expect(res.body).toContain(`bidirectionalMode="rtp" codec="${telnyxCodec}" bidirectionalCodec="${telnyxCodec}" bidirectionalSamplingRate="${rate}"/>`)
    })

    it.each([
      ["no signature", () => ({})],
      ["another key's signature", (body: string) => ({ ...otherKeySignature(body) })],
      ["a stale timestamp", (body: string) => telnyx.signWebhook(body, Math.floor(Date.now() / 1000) - 600)]
    ])("refuses %s with 401", async (_name, headers) => {
      const res = await post(path(), texmlForm(), headers)
      expect(res.statusCode).toBe(401)
      expect(res.body).toBe(`${XML}<Response><Hangup/></Response>`)
    })

    it("an unknown environment hears a refusal", async () => {
      const url = `/telephony/telnyx/texml?agentId=${t.agentId}&environmentId=env_gone`
      const res = await post(url, texmlForm(), (body) => telnyx.signWebhook(body))
      expect(res.statusCode).toBe(200)
      expect(res.body).toBe(`${XML}<Response><Say>This number is not in service.</Say><Hangup/></Response>`)
    })

    it("a signed request without CallSid is 400", async () => {
      const { CallSid: _, ...form } = texmlForm()
      const res = await post(path(), form, (body) => telnyx.signWebhook(body))
      expect(res.statusCode).toBe(400)
    })
  })

  describe("POST /telephony/telnyx/call-control", () => {
    const path = () => `/telephony/telnyx/call-control?agentId=${t.agentId}&environmentId=${t.environmentId}`
    const callPayload = (callControlId: string, overrides: Record<string, unknown> = {}) => ({
      call_control_id: callControlId,
      call_leg_id: "2a1b3c",
      call_session_id: "4d5e6f",
      connection_id: "1684641123236054244",
      client_state: null,
      from: "+14155550100",
      to: "+14155550111",
      direction: "incoming",
      state: "parked",
      ...overrides
    })
    const post = (body: string, headers: Record<string, string> = telnyx.signWebhook(body), url = path()) =>
      t.app.inject({ method: "POST", url, payload: body, headers: { "content-type": "application/json", ...headers } })
    let markers = 0
    /**
     * A later event on the same path: an incoming call's call.initiated, which callgate answers. Once
     * its `answer` has arrived, whatever the webhooks before it made callgate send has arrived too.
     */
    const later = async () => {
      const callId = `v3:cc-later-${++markers}`
      expect((await post(telnyx.callControlEvent("call.initiated", callPayload(callId)))).statusCode).toBe(200)
      await telnyx.waitFor(() => telnyx.commands(callId, "answer").length === 1)
      return `/v2/calls/${callId}/actions/answer`
    }

    it("call.initiated: 200 at once, then the call is answered with a bidirectional RTP stream carrying the session token and the session id as client_state", async () => {
      const res = await post(telnyx.callControlEvent("call.initiated", callPayload("v3:cc-in-1")))
      expect(res.statusCode).toBe(200)
      expect(res.json()).toEqual({ received: true })
      await telnyx.waitFor(() => telnyx.commands("v3:cc-in-1", "answer").length === 1)
      const answer = telnyx.commands("v3:cc-in-1", "answer")[0]!
      expect(answer.headers.authorization).toBe(`Bearer ${telnyx.apiKey}`)
      const json = answer.json as Record<string, string>
      const token = json.stream_auth_token!
      const sessionId = (await t.claimsOf(token))?.entrySessionId
      expect(sessionId).toMatch(/^ses_/)
      expect(json).toEqual({
        stream_url: `wss://callgate.test/telephony/telnyx/stream?token=${encodeURIComponent(token)}`,
        stream_track: "inbound_track",
        stream_bidirectional_mode: "rtp",
        stream_codec: "PCMU",
        stream_bidirectional_codec: "PCMU",
        stream_bidirectional_sampling_rate: 8000,
        stream_auth_token: token,
        // Every later webhook of the call names its session (streaming.stopped: docs/reliability.md).
        client_state: Buffer.from(sessionId!).toString("base64"),
        command_id: expect.stringMatching(/^[0-9a-f-]{36}$/)
      })
      expect(await t.claimsOf(token)).toMatchObject({
        agentId: t.agentId,
        environmentId: t.environmentId,
        kind: "telnyx-call-control",
        callId: "v3:cc-in-1",
        from: "+14155550100",
        to: "+14155550111",
        direction: "inbound"
      })
    })

    it("the signature is checked over the raw body bytes (whitespace and key order kept)", async () => {
      const body = `{ "meta": {"attempt": 1},  "data": {"payload": ${JSON.stringify(callPayload("v3:cc-in-2"))}, "event_type": "call.initiated"} }`
      expect((await post(body)).statusCode).toBe(200)
      await telnyx.waitFor(() => telnyx.commands("v3:cc-in-2", "answer").length === 1)
    })

    it("call.initiated for an unknown environment rejects the call", async () => {
      const url = `/telephony/telnyx/call-control?agentId=${t.agentId}&environmentId=env_gone`
      const body = telnyx.callControlEvent("call.initiated", callPayload("v3:cc-in-3"))
      expect((await post(body, telnyx.signWebhook(body), url)).statusCode).toBe(200)
      await telnyx.waitFor(() => telnyx.commands("v3:cc-in-3").length === 1)
      expect(telnyx.commands("v3:cc-in-3").map((r) => [r.path, r.json])).toEqual([
        ["/v2/calls/v3:cc-in-3/actions/reject", { cause: "CALL_REJECTED", command_id: expect.any(String) }]
      ])
    })

    it("an outgoing call is not answered on call.initiated; its stream starts on call.answered", async () => {
      expect((await post(telnyx.callControlEvent("call.initiated", callPayload("v3:cc-out-1", { direction: "outgoing" })))).statusCode).toBe(200)
      expect((await post(telnyx.callControlEvent("call.answered", callPayload("v3:cc-out-1", { direction: "outgoing" })))).statusCode).toBe(200)
      await telnyx.waitFor(() => telnyx.commands("v3:cc-out-1", "streaming_start").length === 1)
      // The stream's start is the only request for the call: call.initiated sent nothing before it.
      expect(telnyx.requests.map((r) => r.path)).toEqual(["/v2/calls/v3:cc-out-1/actions/streaming_start"])
      const [start] = telnyx.commands("v3:cc-out-1", "streaming_start")
      const token = (start!.json as Record<string, string>).stream_auth_token!
      expect(start!.json).toMatchObject({ stream_url: `wss://callgate.test/telephony/telnyx/stream?token=${encodeURIComponent(token)}`, stream_bidirectional_mode: "rtp" })
      expect(await t.claimsOf(token)).toMatchObject({ callId: "v3:cc-out-1", direction: "outbound" })
    })

    it.each(CODECS)(
      "an environment's telnyxStreamCodec %s is asked for both ways in an incoming call's answer and an outgoing call's streaming_start",
      async (codec, telnyxCodec, rate) => {
        const environmentId = await environmentWith(codec)
        const url = `/telephony/telnyx/call-control?agentId=${t.agentId}&environmentId=${environmentId}`
        const incoming = `v3:cc-codec-in-${codec}`
        const outgoing = `v3:cc-codec-out-${codec}`
        const initiated = telnyx.callControlEvent("call.initiated", callPayload(incoming))
        expect((await post(initiated, telnyx.signWebhook(initiated), url)).statusCode).toBe(200)
        const answered = telnyx.callControlEvent("call.answered", callPayload(outgoing, { direction: "outgoing" }))
        expect((await post(answered, telnyx.signWebhook(answered), url)).statusCode).toBe(200)
        await telnyx.waitFor(() => telnyx.commands(incoming, "answer").length === 1 && telnyx.commands(outgoing, "streaming_start").length === 1)
        const asked = { stream_codec: telnyxCodec, stream_bidirectional_codec: telnyxCodec, stream_bidirectional_sampling_rate: rate, stream_bidirectional_mode: "rtp" }
        expect(telnyx.commands(incoming, "answer")[0]!.json).toMatchObject(asked)
        expect(telnyx.commands(outgoing, "streaming_start")[0]!.json).toMatchObject(asked)
      }
    )

    it("call.hangup publishes CallHungUp for the session", async () => {
      const event = await t.runtime.runPromise(
        Effect.scoped(
          Effect.gen(function* () {
            const events = yield* CarrierCallEvents
            const subscription = yield* events.subscribe
            const res = yield* Effect.promise(() =>
              post(telnyx.callControlEvent("call.hangup", callPayload("v3:cc-in-4", { hangup_cause: "normal_clearing", hangup_source: "caller" })))
            )
            expect(res.statusCode).toBe(200)
            return yield* Queue.take(subscription).pipe(Effect.timeout("2 seconds"))
          })
        )
      )
      expect(event).toEqual(CarrierCallEvent.CallHungUp({ callId: "v3:cc-in-4", cause: "normal_clearing" }))
      expect(telnyx.requests).toHaveLength(0)
    })

    it("other events are acknowledged and ignored", async () => {
      const res = await post(telnyx.callControlEvent("call.bridged", { call_control_id: "v3:cc-in-5" }))
      expect(res.statusCode).toBe(200)
      // The next call's answer is the only request: this webhook sent nothing.
      const next = await later()
      expect(telnyx.requests.map((r) => r.path)).toEqual([next])
    })

    it.each([
      ["no signature", (body: string) => ({})],
      ["another key's signature", (body: string) => otherKeySignature(body)],
      ["a stale timestamp", (body: string) => telnyx.signWebhook(body, Math.floor(Date.now() / 1000) - 301)],
      ["a future timestamp", (body: string) => telnyx.signWebhook(body, Math.floor(Date.now() / 1000) + 400)],
      ["a signature over a different body", (body: string) => telnyx.signWebhook(body.replace("v3:cc-in-6", "v3:cc-other"))]
    ])("refuses %s with 401 and sends no command", async (_name, headers) => {
      const body = telnyx.callControlEvent("call.initiated", callPayload("v3:cc-in-6"))
      const res = await post(body, headers(body))
      expect(res.statusCode).toBe(401)
      expect(res.json()).toEqual({ error: { code: "UNAUTHORIZED", message: "The webhook signature is not valid.", details: [] } })
      // The next call's answer is the only request: this webhook sent nothing.
      const next = await later()
      expect(telnyx.requests.map((r) => r.path)).toEqual([next])
    })

    it.each([
      ["not JSON", "{not json", 400, "MALFORMED_JSON"],
      ["JSON that is not an event", '{"hello": "world"}', 400, "VALIDATION_FAILED"],
      ["call.initiated without call_control_id", JSON.stringify({ data: { event_type: "call.initiated", payload: { from: "+1" } } }), 400, "VALIDATION_FAILED"],
      ["an array", "[1,2,3]", 400, "VALIDATION_FAILED"]
    ])("a signed body that is %s is 400", async (_name, body, status, code) => {
      const res = await post(body)
      expect(res.statusCode).toBe(status)
      expect(res.json().error.code).toBe(code)
    })

    it("call.initiated on a URL without agentId/environmentId is 400", async () => {
      const body = telnyx.callControlEvent("call.initiated", callPayload("v3:cc-in-7"))
      const res = await post(body, telnyx.signWebhook(body), "/telephony/telnyx/call-control")
      expect(res.statusCode).toBe(400)
      // The next call's answer is the only request: this webhook sent nothing.
      const next = await later()
      expect(telnyx.requests.map((r) => r.path)).toEqual([next])
    })

    it("call.initiated: the webhook URL's extra query parameters ride in the token; out of bounds is 400", async () => {
      const body = telnyx.callControlEvent("call.initiated", callPayload("v3:cc-in-params"))
      expect((await post(body, telnyx.signWebhook(body), `${path()}&lang=es&queue=sales`)).statusCode).toBe(200)
      await telnyx.waitFor(() => telnyx.commands("v3:cc-in-params", "answer").length === 1)
      const token = (telnyx.commands("v3:cc-in-params", "answer")[0]!.json as Record<string, string>).stream_auth_token!
      expect((await t.claimsOf(token))?.customParameters).toEqual({ lang: "es", queue: "sales" })

      const refused = telnyx.callControlEvent("call.initiated", callPayload("v3:cc-in-params-2"))
      const res = await post(refused, telnyx.signWebhook(refused), `${path()}&bad%20name=1`)
      expect(res.statusCode).toBe(400)
      expect(res.json().error.message).toContain("custom parameter name")
    })

    it("a failing answer command does not change the webhook's 200", async () => {
      telnyx.failNext({ status: 500 }, 3)
      const res = await post(telnyx.callControlEvent("call.initiated", callPayload("v3:cc-in-8")))
      expect(res.statusCode).toBe(200)
      await telnyx.waitFor(() => telnyx.commands("v3:cc-in-8", "answer").length === 3)
    })
  })

  /** A new environment of the test's agent asking Telnyx for `codec`. */
  const environmentWith = async (codec: TelnyxStreamCodec) =>
    (await t.runtime.runPromise(Effect.flatMap(Environments, (envs) => envs.create(t.agentId, { name: `codec ${codec}`, telnyxStreamCodec: codec })))).id

  let otherKey: FakeTelnyx | undefined
  const otherKeySignature = (body: string) => otherKey!.signWebhook(body)
  beforeAll(async () => {
    otherKey = await startFakeTelnyx()
  })
  afterAll(() => otherKey?.close())
})
