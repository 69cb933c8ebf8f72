import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { twilioSignature } from "../support/fakeTwilio.js"
import { makeTestApp, type TestApp } from "../support/testApp.js"

const AUTH_TOKEN = "status-callback-auth-token-0001"
const PUBLIC_URL = "https://callgate.example.test"
const PATH = "/telephony/twilio/status?sessionId=ses_status_1"

/**
 * Twilio's status callback for placed calls is unauthenticated like the other carrier webhooks
 * (docs/security.md, "HTTP limits", "Authentication throttling"): the same small body limit and
 * the same per-address throttle of failed signatures.
 */
describe("the Twilio status callback route", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await makeTestApp("memory", {
      TWILIO_ACCOUNT_SID: "AC00000000000000000000000000000001",
      TWILIO_AUTH_TOKEN: AUTH_TOKEN,
      PUBLIC_URL,
      AUTH_FAILURES_PER_MINUTE: "3",
      CARRIER_WEBHOOK_BODY_LIMIT_BYTES: "4096"
    })
  })
  afterAll(() => t.close())

  const post = (remoteAddress: string, form: Record<string, string>, signature: string) =>
    t.app.inject({
      method: "POST",
      url: PATH,
      remoteAddress,
      payload: new URLSearchParams(form).toString(),
      headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": signature }
    })

  const form = { CallSid: "CA0123456789abcdef0123456789abcdef", CallStatus: "ringing" }
  const signed = (fields: Record<string, string>) => twilioSignature(AUTH_TOKEN, `${PUBLIC_URL}${PATH}`, fields)

  it("a body over CARRIER_WEBHOOK_BODY_LIMIT_BYTES is 413, before any signature check", async () => {
    const big = { ...form, Pad: "x".repeat(5000) }
    const answer = await post("198.51.100.20", big, signed(big))
    expect(answer.statusCode).toBe(413)
    // The same callback, small, gets past the limit (to the store: the session is unknown here, still 204).
    expect((await post("198.51.100.20", form, signed(form))).statusCode).toBe(204)
  })

  it("bad signatures from one address are throttled: 429 with Retry-After after the burst; a signed one from there is answered; other addresses unaffected", async () => {
    const address = "198.51.100.21"
    for (let i = 0; i < 3; i++) expect((await post(address, form, `forged-${i}`)).statusCode).toBe(401)
    const limited = await post(address, form, "forged-last")
    expect(limited.statusCode).toBe(429)
    expect(Number(limited.headers["retry-after"])).toBeGreaterThan(0)
    expect((await post(address, form, signed(form))).statusCode).toBe(204)
    expect((await post(address, form, "forged-again")).statusCode).toBe(429)
    expect((await post("198.51.100.22", form, "forged-elsewhere")).statusCode).toBe(401)
  })
})
