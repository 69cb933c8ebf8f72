import { Either } from "effect"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import type { CallRef } from "../../src/kernel/Carrier.js"
import { startFakeTwilio, type FakeTwilio } from "../support/fakeTwilio.js"
import { freePort } from "../support/redisServer.js"
import { carrierOp, type CarrierRuntime, makeCarrierRuntime, metricsText } from "../telephony/carrierRuntime.js"

const XML = '<?xml version="1.0" encoding="UTF-8"?>'
const call = (callId: string, accountSid?: string): CallRef => ({ kind: "twilio", callId, accountSid })

describe("Twilio carrier (through the twilio SDK, against a Twilio-compatible server)", () => {
  let twilio: FakeTwilio
  let runtime: CarrierRuntime

  beforeAll(async () => {
    twilio = await startFakeTwilio()
    // The default request timeout (5 s): a tighter one makes a slow moment of a busy machine look
    // like a lost request, and the retry a second call update.
    runtime = makeCarrierRuntime(twilio.env)
  })
  afterEach(() => twilio.reset())
  afterAll(async () => {
    await runtime.dispose()
    await twilio.close()
  })

  const callPath = (callSid: string, account = twilio.accountSid) => `/2010-04-01/Accounts/${account}/Calls/${callSid}.json`
  const basicAuth = () => `Basic ${Buffer.from(`${twilio.accountSid}:${twilio.authToken}`).toString("base64")}`

  it("hangup is a call update with Status=completed, Basic auth, form-encoded", async () => {
    const result = await carrierOp(runtime, (c) => c.hangup(call("CA0001")))
    expect(Either.isRight(result)).toBe(true)
    expect(twilio.requests).toHaveLength(1)
    const [request] = twilio.requests
    expect(request!.method).toBe("POST")
    expect(request!.path).toBe(callPath("CA0001"))
    expect(request!.headers.authorization).toBe(basicAuth())
    expect(request!.headers["content-type"]).toBe("application/x-www-form-urlencoded")
    expect(request!.form).toEqual({ Status: "completed" })
  })

  it("addresses the call's own account when the call ref names one (subaccounts)", async () => {
    await carrierOp(runtime, (c) => c.hangup(call("CA0002", "AC99999999999999999999999999999999")))
    expect(twilio.requests.map((r) => r.path)).toEqual([callPath("CA0002", "AC99999999999999999999999999999999")])
  })

  it("transfer updates the call with <Dial callerId> TwiML built by the SDK", async () => {
    const result = await carrierOp(runtime, (c) => c.transfer(call("CA0003"), "+14155550199", "+14155550111"))
    expect(Either.isRight(result)).toBe(true)
    expect(twilio.callUpdates("CA0003").map((r) => r.form)).toEqual([
      { Twiml: `${XML}<Response><Dial callerId="+14155550111">+14155550199</Dial></Response>` }
    ])
  })

  it("transfer without a caller id dials the number alone", async () => {
    await carrierOp(runtime, (c) => c.transfer(call("CA0004"), "+442071838750"))
    expect(twilio.callUpdates("CA0004")[0]!.form).toEqual({ Twiml: `${XML}<Response><Dial>+442071838750</Dial></Response>` })
  })

  it("transfer refuses a destination that is not E.164 without calling Twilio", async () => {
    const result = await carrierOp(runtime, (c) => c.transfer(call("CA0005"), "+1 415 555 0199</Dial><Play>x</Play>"))
    expect(Either.isLeft(result) && result.left).toMatchObject({ _tag: "CarrierError", provider: "twilio", operation: "transfer", retryable: false })
    expect(twilio.requests).toHaveLength(0)
  })

  it("applyTwiml sends the document exactly as given", async () => {
    const twiml = `${XML}<Response><Say>Transferring you &amp; goodbye</Say><Redirect>https://example.com/next</Redirect></Response>`
    const result = await carrierOp(runtime, (c) => c.applyTwiml(call("CA0006"), twiml))
    expect(Either.isRight(result)).toBe(true)
    expect(twilio.callUpdates("CA0006")[0]!.form).toEqual({ Twiml: twiml })
  })

  it("applyTwiml refuses a document over Twilio's 4000 characters, marked unexpected, without calling Twilio", async () => {
    const twiml = `<Response><Say>${"a".repeat(4000)}</Say></Response>`
    const result = await carrierOp(runtime, (c) => c.applyTwiml(call("CA0007"), twiml))
    expect(Either.isLeft(result) && result.left).toMatchObject({ provider: "twilio", operation: "applyTwiml", unexpected: true, retryable: false })
    expect(twilio.requests).toHaveLength(0)
  })

  it("a call that already ended (21220) counts as done, for every operation", async () => {
    twilio.endCall("CA0008")
    const results = [
      await carrierOp(runtime, (c) => c.hangup(call("CA0008"))),
      await carrierOp(runtime, (c) => c.transfer(call("CA0008"), "+14155550199")),
      await carrierOp(runtime, (c) => c.applyTwiml(call("CA0008"), "<Response><Hangup/></Response>"))
    ]
    expect(results.every(Either.isRight)).toBe(true)
    expect(twilio.requests).toHaveLength(3)
  })

  it("a second hangup of the same call is done (the first one completed it)", async () => {
    await carrierOp(runtime, (c) => c.hangup(call("CA0009")))
    const again = await carrierOp(runtime, (c) => c.hangup(call("CA0009")))
    expect(Either.isRight(again)).toBe(true)
    expect(twilio.requests).toHaveLength(2)
  })

  it("a call Twilio does not know (404) counts as done", async () => {
    twilio.forgetCall("CA0010")
    expect(Either.isRight(await carrierOp(runtime, (c) => c.hangup(call("CA0010"))))).toBe(true)
    expect(await metricsText(runtime)).toMatch(/callgate_carrier_requests_total\{provider="twilio",operation="hangup",outcome="ended"\} [1-9]/)
  })

  it("hangup is retried after a 500 and succeeds", async () => {
    twilio.failNext({ status: 500 })
    expect(Either.isRight(await carrierOp(runtime, (c) => c.hangup(call("CA0011"))))).toBe(true)
    expect(twilio.callUpdates("CA0011").map((r) => r.form)).toEqual([{ Status: "completed" }, { Status: "completed" }])
  })

  it("hangup is retried after a dropped connection and after a timeout", async () => {
    // Its own request timeout, well above a request's time on a busy machine, and a reply held far longer.
    const timing = makeCarrierRuntime({ ...twilio.env, CARRIER_REQUEST_TIMEOUT: "2s" })
    try {
      twilio.failNext({ drop: true })
      twilio.failNext({ delayMs: 20_000 })
      expect(Either.isRight(await carrierOp(timing, (c) => c.hangup(call("CA0012"))))).toBe(true)
      expect(twilio.callUpdates("CA0012")).toHaveLength(3)
    } finally {
      await timing.dispose()
    }
  })

  it("a transfer is not repeated after an ambiguous 500 (a second update would redial): retryable CarrierError", async () => {
    twilio.failNext({ status: 500 })
    const result = await carrierOp(runtime, (c) => c.transfer(call("CA0013"), "+14155550199"))
    expect(Either.isLeft(result) && result.left).toMatchObject({ provider: "twilio", operation: "transfer", status: 500, retryable: true })
    expect(twilio.callUpdates("CA0013")).toHaveLength(1)
  })

  it("a transfer is repeated after 503 and 429, which Twilio did not act on", async () => {
    twilio.failNext({ status: 503 })
    twilio.failNext({ status: 429, code: 20429, message: "Too Many Requests" })
    expect(Either.isRight(await carrierOp(runtime, (c) => c.transfer(call("CA0014"), "+14155550199")))).toBe(true)
    expect(twilio.callUpdates("CA0014")).toHaveLength(3)
  })

  it("gives up after three attempts with a retryable CarrierError", async () => {
    twilio.failNext({ status: 429, code: 20429, message: "Too Many Requests" }, 5)
    const result = await carrierOp(runtime, (c) => c.hangup(call("CA0015")))
    expect(Either.isLeft(result) && result.left).toMatchObject({ status: 429, retryable: true })
    expect(Either.isLeft(result) && result.left.message).toBe("twilio hangup failed (HTTP 429): error 20429: Too Many Requests")
    expect(twilio.callUpdates("CA0015")).toHaveLength(3)
  })

  it("a 400 other than 21220 is a permanent failure, not retried", async () => {
    twilio.failNext({ status: 400, code: 21205, message: "Url is not a valid url" })
    const result = await carrierOp(runtime, (c) => c.applyTwiml(call("CA0016"), "<Response><Hangup/></Response>"))
    expect(Either.isLeft(result) && result.left).toMatchObject({ status: 400, retryable: false, detail: "error 21205: Url is not a valid url" })
    expect(twilio.requests).toHaveLength(1)
  })

  it("wrong credentials are a permanent failure whose message holds no credential", async () => {
    const wrong = makeCarrierRuntime({ ...twilio.env, TWILIO_AUTH_TOKEN: "not-the-token-xyz" })
    try {
      const result = await carrierOp(wrong, (c) => c.hangup(call("CA0017")))
      expect(Either.isLeft(result) && result.left).toMatchObject({ status: 401, retryable: false })
      const text = Either.isLeft(result) ? `${result.left.message} ${JSON.stringify(result.left)}` : ""
      expect(text).not.toContain("not-the-token-xyz")
      expect(text).not.toContain(Buffer.from(`${twilio.accountSid}:not-the-token-xyz`).toString("base64"))
    } finally {
      await wrong.dispose()
    }
  })

  it("a refused connection is a retryable CarrierError", async () => {
    const closed = makeCarrierRuntime({ ...twilio.env, TWILIO_API_BASE_URL: `http://127.0.0.1:${await freePort()}` })
    try {
      const result = await carrierOp(closed, (c) => c.hangup(call("CA0018")))
      expect(Either.isLeft(result) && result.left).toMatchObject({ retryable: true, detail: "connection failed (ECONNREFUSED)" })
    } finally {
      await closed.dispose()
    }
  })

  it("without credentials every operation fails at once, not retryable", async () => {
    const bare = makeCarrierRuntime({})
    try {
      const result = await carrierOp(bare, (c) => c.hangup(call("CA0019")))
      expect(Either.isLeft(result) && result.left).toMatchObject({ provider: "twilio", retryable: false })
      expect(Either.isLeft(result) && result.left.detail).toContain("not configured")
    } finally {
      await bare.dispose()
    }
  })
})
