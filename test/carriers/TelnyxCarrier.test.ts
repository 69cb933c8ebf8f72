import { Effect, Either, TestClock } from "effect"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { type CallRef, Carriers } from "../../src/kernel/Carrier.js"
import { TelnyxCallCommands } from "../../src/carriers/TelnyxCallCommands.js"
import { TelnyxTwimlRunner } from "../../src/carriers/TelnyxTwimlRunner.js"
import { translateTwiml } from "../../src/twiml/TwimlCallControl.js"
import { type FakeTelnyx, startFakeTelnyx } from "../support/fakeTelnyx.js"
import { carrierOp, type CarrierRuntime, makeCarrierRuntime, metricsText } from "../telephony/carrierRuntime.js"

const XML = '<?xml version="1.0" encoding="UTF-8"?>'
const ACCOUNT = "f5586561-8ff0-4291-a0ac-84fe544797bd"
const callControl = (callId: string): CallRef => ({ kind: "telnyx-call-control", callId })
const texml = (callId: string, accountSid: string | null = ACCOUNT): CallRef => ({ kind: "telnyx-texml", callId, accountSid: accountSid ?? undefined })
const anyCommandId = expect.stringMatching(/^[0-9a-f-]{36}$/)
/** Polls `check` until it holds, or fails after `timeoutMs`. */
const until = async (check: () => Promise<boolean>, what: string, timeoutMs = 30_000) => {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

describe("Telnyx carrier (through the telnyx SDK, against a Telnyx-compatible server)", () => {
  let telnyx: FakeTelnyx
  let runtime: CarrierRuntime
  const progress = (callId: string, event: "speak.ended" | "playback.ended" | "hangup") =>
    runtime.runPromise(Effect.flatMap(TelnyxTwimlRunner, (runner) => runner.callProgress(callId, event)))

  beforeAll(async () => {
    telnyx = await startFakeTelnyx()
    // The default request timeout (5 s): a tighter one makes a slow moment of a busy machine look
    // like a lost request, and the retry a second command.
    runtime = makeCarrierRuntime(telnyx.env)
  })
  afterEach(() => telnyx.reset())
  afterAll(async () => {
    await runtime.dispose()
    await telnyx.close()
  })

  describe("Call Control calls", () => {
    it("hangup is the hangup command with Bearer auth and a command_id", async () => {
      expect(Either.isRight(await carrierOp(runtime, (c) => c.hangup(callControl("v3:cc-1"))))).toBe(true)
      expect(telnyx.requests).toHaveLength(1)
      const [request] = telnyx.requests
      expect(request!.method).toBe("POST")
      expect(request!.path).toBe("/v2/calls/v3:cc-1/actions/hangup")
      expect(request!.headers.authorization).toBe(`Bearer ${telnyx.apiKey}`)
      expect(request!.headers["content-type"]).toBe("application/json")
      expect(request!.json).toEqual({ command_id: anyCommandId })
    })

    it("transfer is the transfer command with to and from", async () => {
      await carrierOp(runtime, (c) => c.transfer(callControl("v3:cc-2"), "+14155550199", "+14155550111"))
      expect(telnyx.commands("v3:cc-2", "transfer").map((r) => r.json)).toEqual([
        { to: "+14155550199", from: "+14155550111", command_id: anyCommandId }
      ])
    })

    it("a call that already ended (422, error 90018) or is unknown (404) counts as done", async () => {
      telnyx.endCall("v3:cc-3")
      telnyx.forgetCall("v3:cc-4")
      expect(Either.isRight(await carrierOp(runtime, (c) => c.hangup(callControl("v3:cc-3"))))).toBe(true)
      expect(Either.isRight(await carrierOp(runtime, (c) => c.transfer(callControl("v3:cc-4"), "+14155550199")))).toBe(true)
      expect(telnyx.requests).toHaveLength(2)
      expect(await metricsText(runtime)).toMatch(/callgate_carrier_requests_total\{provider="telnyx",operation="transfer",outcome="ended"\} [1-9]/)
    })

    it("commands are repeated after a 500 or a dropped connection with the same command_id (Telnyx deduplicates)", async () => {
      telnyx.failNext({ status: 500 })
      telnyx.failNext({ drop: true })
      expect(Either.isRight(await carrierOp(runtime, (c) => c.transfer(callControl("v3:cc-5"), "+14155550199")))).toBe(true)
      const attempts = telnyx.commands("v3:cc-5", "transfer").map((r) => (r.json as { command_id: string }).command_id)
      expect(attempts).toHaveLength(3)
      expect(new Set(attempts).size).toBe(1)
    })

    it("a 422 other than call-ended is permanent, with Telnyx's error in the detail", async () => {
      telnyx.failNext({ status: 422, code: "90015", title: "Invalid destination" })
      const result = await carrierOp(runtime, (c) => c.transfer(callControl("v3:cc-6"), "+14155550199"))
      expect(Either.isLeft(result) && result.left).toMatchObject({ provider: "telnyx", status: 422, retryable: false, detail: "error 90015: Invalid destination" })
      expect(telnyx.requests).toHaveLength(1)
    })

    it.each([
      ["PCMU", "PCMU", 8000],
      ["PCMA", "PCMA", 8000],
      ["L16;rate=8000", "L16", 8000],
      ["L16;rate=16000", "L16", 16000],
      ["G722", "G722", 16000]
    ] as const)(
      "answerWithStream and startStream ask for a bidirectional RTP stream in %s both ways, with its auth token and the session id as client_state",
      async (codec, telnyxCodec, samplingRate) => {
        const callId = `v3:cc-7-${codec}`
        const stream = { url: "wss://callgate.test/telephony/telnyx/stream?token=tok.sig", token: "tok.sig", sessionId: "ses_abc123", codec }
        await runtime.runPromise(Effect.flatMap(TelnyxCallCommands, (commands) => commands.answerWithStream(callId, stream)))
        await runtime.runPromise(Effect.flatMap(TelnyxCallCommands, (commands) => commands.startStream(callId, stream)))
        const expected = {
          stream_url: "wss://callgate.test/telephony/telnyx/stream?token=tok.sig",
          stream_track: "inbound_track",
          stream_bidirectional_mode: "rtp",
          stream_codec: telnyxCodec,
          stream_bidirectional_codec: telnyxCodec,
          stream_bidirectional_sampling_rate: samplingRate,
          stream_auth_token: "tok.sig",
          client_state: Buffer.from("ses_abc123").toString("base64"),
          command_id: anyCommandId
        }
        expect(telnyx.commands(callId, "answer").map((r) => r.json)).toEqual([expected])
        expect(telnyx.commands(callId, "streaming_start").map((r) => r.json)).toEqual([expected])
      }
    )
  })

  describe("Call Control calls: TwiML translated into commands", () => {
    // The document runner on the TestClock: while it waits (for speak.ended, for a <Pause>) time
    // stands still, so "nothing more was sent while it waited" holds for as long as the test looks,
    // and TestClock.sleeps shows when it has reached its wait.
    let clocked: CarrierRuntime
    beforeAll(() => {
      clocked = makeCarrierRuntime(telnyx.env, { clock: "test" })
    })
    afterAll(() => clocked.dispose())
    const clockedProgress = (callId: string, event: "speak.ended" | "playback.ended" | "hangup") =>
      clocked.runPromise(Effect.flatMap(TelnyxTwimlRunner, (runner) => runner.callProgress(callId, event)))
    /** Resolves once the runner waits `ms` from now on the TestClock (a speak.ended wait, a <Pause>). */
    const waitingFor = async (ms: number) => {
      const now = await clocked.runPromise(TestClock.currentTimeMillis)
      await until(async () => [...(await clocked.runPromise(TestClock.sleeps()))].includes(now + ms), `a ${ms} ms wait of the document runner`)
    }
    /** How long the runner waits for speak.ended after speaking `payload` (see speakWait). */
    const speakWaitMs = (payload: string) => Math.min(5_000 + payload.length * 100, 120_000)

    it("<Dial> becomes one transfer", async () => {
      const twiml = `${XML}<Response><Dial callerId="+14155550111" timeout="20"><Number>+14155550199</Number></Dial><Say>never</Say></Response>`
      // <Dial> ends the document: the runner is given the transfer and nothing after it.
      expect(Either.map(translateTwiml(twiml), (commands) => commands.map((c) => c._tag))).toEqual(Either.right(["Transfer"]))
      expect(Either.isRight(await carrierOp(clocked, (c) => c.applyTwiml(callControl("v3:tw-1"), twiml)))).toBe(true)
      // The call's hangup waits for whatever of the document still runs to stop; after it, nothing of the document can follow.
      await clockedProgress("v3:tw-1", "hangup")
      expect(telnyx.requests.map((r) => r.path)).toEqual(["/v2/calls/v3:tw-1/actions/transfer"])
      expect(telnyx.requests[0]!.json).toEqual({ to: "+14155550199", from: "+14155550111", timeout_secs: 20, command_id: anyCommandId })
    })

    it("<Say> speaks, waits for call.speak.ended, then the next verb runs; the end of the document hangs up", async () => {
      const twiml = `<Response><Say voice="man" language="en-US">Please hold &amp; wait</Say><Play>https://cdn.example.com/hold.mp3</Play></Response>`
      expect(Either.isRight(await carrierOp(clocked, (c) => c.applyTwiml(callControl("v3:tw-2"), twiml)))).toBe(true)
      expect(telnyx.commands("v3:tw-2").map((r) => r.json)).toEqual([
        { payload: "Please hold & wait", voice: "male", language: "en-US", command_id: anyCommandId }
      ])
      // The runner now waits for speak.ended (with its time limit, on the stopped clock): the play is held back.
      await waitingFor(speakWaitMs("Please hold & wait"))
      expect(telnyx.commands("v3:tw-2")).toHaveLength(1)
      await clockedProgress("v3:tw-2", "speak.ended")
      await telnyx.waitFor(() => telnyx.commands("v3:tw-2", "playback_start").length === 1)
      expect(telnyx.commands("v3:tw-2", "playback_start")[0]!.json).toEqual({ audio_url: "https://cdn.example.com/hold.mp3", command_id: anyCommandId })
      await clockedProgress("v3:tw-2", "playback.ended")
      await telnyx.waitFor(() => telnyx.commands("v3:tw-2", "hangup").length === 1)
      expect(telnyx.commands("v3:tw-2").map((r) => r.path.split("/").pop())).toEqual(["speak", "playback_start", "hangup"])
    })

    it("<Pause> waits locally before the next verb", async () => {
      const twiml = "<Response><Pause length=\"1\"/><Hangup/></Response>"
      const applied = carrierOp(clocked, (c) => c.applyTwiml(callControl("v3:tw-3"), twiml))
      // The pause is a one-second wait on the clock; until it passes, nothing is sent.
      await waitingFor(1000)
      expect(telnyx.commands("v3:tw-3")).toHaveLength(0)
      await clocked.runPromise(TestClock.adjust("1 second"))
      expect(Either.isRight(await applied)).toBe(true)
      expect(telnyx.commands("v3:tw-3", "hangup")).toHaveLength(1)
    })

    it.each([
      ["<Redirect>", "<Response><Redirect>https://example.com/twiml</Redirect></Response>"],
      ["<Gather>", "<Response><Gather><Say>Press 1</Say></Gather></Response>"],
      ["a <Say> before an unsupported verb", "<Response><Say>Hi</Say><Record/></Response>"],
      ["a non-<Response> root", "<Document><Say>Hi</Say></Document>"],
      ["malformed XML", "<Response><Say>Hi</Response>"],
      ["a DOCTYPE", '<!DOCTYPE r [<!ENTITY a "b">]><Response><Say>&a;</Say></Response>']
    ])("%s is refused as unexpected and nothing is sent", async (_name, twiml) => {
      const result = await carrierOp(clocked, (c) => c.applyTwiml(callControl("v3:tw-4"), twiml))
      expect(Either.isLeft(result) && result.left).toMatchObject({ provider: "telnyx", operation: "applyTwiml", unexpected: true, retryable: false })
      // Refused before anything runs: no document is left for the call. The next order on the
      // call (a hangup, which first stops any document still running) is the first request.
      await clockedProgress("v3:tw-4", "hangup")
      expect(Either.isRight(await carrierOp(clocked, (c) => c.hangup(callControl("v3:tw-4"))))).toBe(true)
      expect(telnyx.requests.map((r) => r.path)).toEqual(["/v2/calls/v3:tw-4/actions/hangup"])
    })

    it("a failure of the first command is the caller's CarrierError", async () => {
      telnyx.failNext({ status: 400, code: "10015", title: "Bad Request" })
      const result = await carrierOp(clocked, (c) => c.applyTwiml(callControl("v3:tw-5"), "<Response><Say>Hi</Say></Response>"))
      expect(Either.isLeft(result) && result.left).toMatchObject({ operation: "speak", status: 400, retryable: false })
    })

    it("the call hanging up stops a document still playing", async () => {
      await carrierOp(clocked, (c) => c.applyTwiml(callControl("v3:tw-6"), "<Response><Say>Hold on</Say><Dial>+14155550199</Dial></Response>"))
      await waitingFor(speakWaitMs("Hold on"))
      // The hangup event returns once the document has stopped: a speak.ended after it finds no one waiting.
      await clockedProgress("v3:tw-6", "hangup")
      await clockedProgress("v3:tw-6", "speak.ended")
      // Past every limit the document could have waited for: still only the speak.
      await clocked.runPromise(TestClock.adjust(speakWaitMs("Hold on")))
      expect(telnyx.commands("v3:tw-6").map((r) => r.path.split("/").pop())).toEqual(["speak"])
    })

    it("a newer order (hangup) supersedes a document still playing", async () => {
      await carrierOp(clocked, (c) => c.applyTwiml(callControl("v3:tw-7"), "<Response><Say>Hold on</Say><Dial>+14155550199</Dial></Response>"))
      await waitingFor(speakWaitMs("Hold on"))
      await carrierOp(clocked, (c) => c.hangup(callControl("v3:tw-7")))
      await clockedProgress("v3:tw-7", "speak.ended")
      await clocked.runPromise(TestClock.adjust(speakWaitMs("Hold on")))
      expect(telnyx.commands("v3:tw-7").map((r) => r.path.split("/").pop())).toEqual(["speak", "hangup"])
    })
  })

  describe("outbound calls (the port's place and cancel)", () => {
    const dial = { kind: "telnyx-call-control", to: "+14155550199", from: "+14155550111", answerUrl: "https://callgate.example/telephony/telnyx/call-control?sessionId=s1", statusUrl: "https://callgate.example/status", timeoutSeconds: 25 } as const

    it("place is a Call Control dial on TELNYX_CONNECTION_ID, answered with the new call; cancel hangs it up", async () => {
      const withConnection = makeCarrierRuntime({ ...telnyx.env, TELNYX_CONNECTION_ID: "conn-1" })
      try {
        const placed = await withConnection.runPromise(Effect.flatMap(Carriers, (carriers) => carriers.place(dial)))
        const [request] = telnyx.dialed()
        expect(placed).toEqual({ kind: "telnyx-call-control", callId: request!.callControlId })
        expect(request!.json).toMatchObject({ connection_id: "conn-1", to: dial.to, from: dial.from, webhook_url: dial.answerUrl, timeout_secs: 25 })
        await withConnection.runPromise(Effect.flatMap(Carriers, (carriers) => carriers.cancel(placed)))
        expect(telnyx.commands(placed.callId).map((r) => r.path.split("/").pop())).toEqual(["hangup"])
      } finally {
        await withConnection.dispose()
      }
    })

    it("place without TELNYX_CONNECTION_ID fails as not configured and sends nothing", async () => {
      const result = await runtime.runPromise(Effect.either(Effect.flatMap(Carriers, (carriers) => carriers.place(dial))))
      expect(Either.isLeft(result) && result.left).toMatchObject({ _tag: "CarrierError", provider: "telnyx", retryable: false })
      expect(telnyx.requests).toHaveLength(0)
    })
  })

  describe("TeXML calls", () => {
    const updatePath = (callSid: string) => `/v2/texml/Accounts/${ACCOUNT}/Calls/${callSid}`

    it("cancel is a TeXML call update with Status=canceled", async () => {
      expect(Either.isRight(await carrierOp(runtime, (c) => c.cancel(texml("v3:tx-0"))))).toBe(true)
      expect(telnyx.texmlUpdates("v3:tx-0").map((r) => r.form)).toEqual([{ Status: "canceled" }])
    })

    it("hangup is a TeXML call update with Status=completed, form-encoded, Bearer auth", async () => {
      expect(Either.isRight(await carrierOp(runtime, (c) => c.hangup(texml("v3:tx-1"))))).toBe(true)
      const [request] = telnyx.requests
      expect(request!.path).toBe(updatePath("v3:tx-1"))
      expect(request!.headers.authorization).toBe(`Bearer ${telnyx.apiKey}`)
      expect(request!.headers["content-type"]).toBe("application/x-www-form-urlencoded")
      expect(request!.form).toEqual({ Status: "completed" })
    })

    it("transfer is a TeXML call update with <Dial>", async () => {
      await carrierOp(runtime, (c) => c.transfer(texml("v3:tx-2"), "+14155550199", "+14155550111"))
      expect(telnyx.texmlUpdates("v3:tx-2").map((r) => r.form)).toEqual([
        { Texml: `${XML}<Response><Dial callerId="+14155550111">+14155550199</Dial></Response>` }
      ])
    })

    it("applyTwiml sends the document as the call's new TeXML", async () => {
      const document = `${XML}<Response><Say>Goodbye</Say><Hangup/></Response>`
      await carrierOp(runtime, (c) => c.applyTwiml(texml("v3:tx-3"), document))
      expect(telnyx.texmlUpdates("v3:tx-3").map((r) => r.form)).toEqual([{ Texml: document }])
    })

    it("an ended call counts as done; a TeXML update is not repeated after an ambiguous 500", async () => {
      telnyx.endCall("v3:tx-4")
      expect(Either.isRight(await carrierOp(runtime, (c) => c.hangup(texml("v3:tx-4"))))).toBe(true)
      telnyx.failNext({ status: 500 })
      const result = await carrierOp(runtime, (c) => c.applyTwiml(texml("v3:tx-5"), "<Response><Hangup/></Response>"))
      expect(Either.isLeft(result) && result.left).toMatchObject({ status: 500, retryable: true })
      expect(telnyx.texmlUpdates("v3:tx-5")).toHaveLength(1)
    })

    it("a TeXML call without its account id cannot be addressed", async () => {
      const result = await carrierOp(runtime, (c) => c.hangup(texml("v3:tx-6", null)))
      expect(Either.isLeft(result) && result.left).toMatchObject({ retryable: false, detail: "the TeXML call has no account id" })
      expect(telnyx.requests).toHaveLength(0)
    })
  })

  it("without TELNYX_API_KEY every operation fails at once, not retryable", async () => {
    const bare = makeCarrierRuntime({})
    try {
      const result = await carrierOp(bare, (c) => c.hangup(callControl("v3:x")))
      expect(Either.isLeft(result) && result.left).toMatchObject({ provider: "telnyx", retryable: false })
    } finally {
      await bare.dispose()
    }
  })
})
