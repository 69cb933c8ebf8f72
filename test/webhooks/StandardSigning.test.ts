import { Webhook } from "standardwebhooks"
import { describe, expect, it } from "vitest"
import { generateWebhookSecret } from "../../src/secrets/SecretBox.js"
import { eventSignatureHeaders, standardKey, standardSignature, standardSignatureHeaders } from "../../src/webhooks/StandardSigning.js"

describe("Standard Webhooks signing", () => {
  it("matches the specification's example (secret, id, timestamp, body -> v1 signature)", () => {
    const key = standardKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")!
    expect(standardSignature(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, '{"test": 2432232314}')).toBe(
      "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )
  })

  it("agrees with the standardwebhooks package on generated secrets, and the package verifies the headers", () => {
    for (let i = 0; i < 20; i++) {
      const secret = generateWebhookSecret()
      const body = JSON.stringify({ event: "session.ended", n: i, text: "é ✓" })
      const timestamp = Math.floor(Date.now() / 1000)
      const headers = standardSignatureHeaders(secret, `dlv_${i}`, timestamp, body)
      expect(headers["webhook-signature"]).toBe(new Webhook(secret).sign(`dlv_${i}`, new Date(timestamp * 1000), body))
      expect(new Webhook(secret).verify(body, headers)).toEqual(JSON.parse(body))
      expect(() => new Webhook(secret).verify(`${body} `, headers)).toThrow()
    }
  })

  it("a secret that is not whsec_<base64> signs nothing rather than with a guessed key", () => {
    expect(standardKey("whsec_")).toBeUndefined()
    expect(standardKey("whsec_not base64!")).toBeUndefined()
    expect(standardKey("plain-secret")).toBeUndefined()
    expect(standardSignatureHeaders("plain-secret", "id", 1, "{}")).toEqual({})
    expect(standardSignatureHeaders(undefined, "id", 1, "{}")).toEqual({})
  })

  it("each scheme sends its own headers; none without a secret", () => {
    const secret = generateWebhookSecret()
    const names = (scheme: "service" | "standard" | "both", withSecret = true) =>
      Object.keys(eventSignatureHeaders(scheme, withSecret ? secret : undefined, "dlv_1", 1700000000, "{}")).sort()
    expect(names("service")).toEqual(["X-Service-Signature", "X-Service-Timestamp"])
    expect(names("standard")).toEqual(["webhook-id", "webhook-signature", "webhook-timestamp"])
    expect(names("both")).toEqual(["X-Service-Signature", "X-Service-Timestamp", "webhook-id", "webhook-signature", "webhook-timestamp"])
    expect(names("both", false)).toEqual([])
  })
})
