import { Effect, Option, Redacted } from "effect"
import { describe, expect, it } from "vitest"
import { makeTelnyxVerifier, publicWsUrl, verifyTwilioStreamUpgrade, verifyTwilioWebhook } from "../../src/telephony/CarrierSignatures.js"
import { startFakeTelnyx } from "../support/fakeTelnyx.js"
import { twilioSignature } from "../support/fakeTwilio.js"

const TOKEN = "twilio-auth-token-for-signatures"
const config = { publicUrl: "https://callgate.test", twilioAuthToken: Option.some(Redacted.make(TOKEN)) }
const unchecked = { publicUrl: "https://callgate.test", twilioAuthToken: Option.none() }

describe("Twilio signatures", () => {
  it("publicWsUrl maps https to wss and http to ws", () => {
    expect(publicWsUrl("https://callgate.test/base")).toBe("wss://callgate.test/base")
    expect(publicWsUrl("http://localhost:8080")).toBe("ws://localhost:8080")
  })

  it("a stream upgrade is signed over the wss:// URL from PUBLIC_URL, with no parameters", () => {
    const signature = twilioSignature(TOKEN, "wss://callgate.test/telephony/twilio/stream")
    expect(verifyTwilioStreamUpgrade(config, "/telephony/twilio/stream", { "x-twilio-signature": signature })).toBe(true)
  })

  it.each([
    ["no signature", {}],
    ["a signature over the https:// URL", { "x-twilio-signature": twilioSignature(TOKEN, "https://callgate.test/telephony/twilio/stream") }],
    ["a signature over the Host header's URL", { host: "evil.test", "x-twilio-signature": twilioSignature(TOKEN, "wss://evil.test/telephony/twilio/stream") }],
    ["a signature with another token", { "x-twilio-signature": twilioSignature("other", "wss://callgate.test/telephony/twilio/stream") }],
    ["a repeated header", { "x-twilio-signature": [twilioSignature(TOKEN, "wss://callgate.test/telephony/twilio/stream")] }]
  ])("a stream upgrade with %s is refused", (_name, headers) => {
    expect(verifyTwilioStreamUpgrade(config, "/telephony/twilio/stream", headers as never)).toBe(false)
  })

  it("checks are off without TWILIO_AUTH_TOKEN", () => {
    expect(verifyTwilioStreamUpgrade(unchecked, "/telephony/twilio/stream", {})).toBe(true)
    expect(verifyTwilioWebhook(unchecked, "/telephony/twilio/voice", {}, {})).toBe(true)
  })

  it("a webhook is signed over PUBLIC_URL + path and query + sorted form fields", () => {
    const params = { CallSid: "CA1", From: "+14155550100" }
    const signature = twilioSignature(TOKEN, "https://callgate.test/telephony/twilio/voice?agentId=a&environmentId=b", params)
    expect(verifyTwilioWebhook(config, "/telephony/twilio/voice?agentId=a&environmentId=b", { "x-twilio-signature": signature }, params)).toBe(true)
    expect(verifyTwilioWebhook(config, "/telephony/twilio/voice?agentId=a&environmentId=c", { "x-twilio-signature": signature }, params)).toBe(false)
  })
})

describe("Telnyx signatures (Ed25519 through the telnyx SDK)", () => {
  it("accepts a good signature over the exact raw body, refuses tampering, other keys and old timestamps", async () => {
    const telnyx = await startFakeTelnyx()
    const other = await startFakeTelnyx()
    try {
      const verifier = makeTelnyxVerifier(Option.some(telnyx.publicKeyBase64))
      const body = '{ "data": {"event_type": "call.hangup"} }'
      const verify = (raw: string, headers: Record<string, string>) => Effect.runPromise(verifier.verify(Buffer.from(raw), headers))
      expect(await verify(body, telnyx.signWebhook(body))).toEqual({ valid: true })
      expect(await verify(`${body} `, telnyx.signWebhook(body))).toEqual({ valid: false, reason: "signature does not match" })
      expect(await verify(body, other.signWebhook(body))).toEqual({ valid: false, reason: "signature does not match" })
      expect(await verify(body, telnyx.signWebhook(body, Math.floor(Date.now() / 1000) - 301))).toEqual({
        valid: false,
        reason: "timestamp outside the 5 minute tolerance"
      })
      expect(await verify(body, {})).toEqual({ valid: false, reason: "signature headers missing" })
    } finally {
      await telnyx.close()
      await other.close()
    }
  })

  it("a malformed TELNYX_PUBLIC_KEY refuses everything; no key accepts everything", async () => {
    const bad = makeTelnyxVerifier(Option.some("not-a-key"))
    expect(bad.enabled && bad.keyValid).toBe(false)
    expect(await Effect.runPromise(bad.verify(Buffer.from("{}"), {}))).toMatchObject({ valid: false })
    expect(await Effect.runPromise(makeTelnyxVerifier(Option.none()).verify(undefined, {}))).toEqual({ valid: true })
  })
})
