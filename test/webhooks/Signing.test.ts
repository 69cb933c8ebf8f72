import { createHmac } from "node:crypto"
import { describe, expect, it } from "vitest"
import { signPayload, verifySignature } from "../../src/webhooks/index.js"
import { signatureHeaders } from "../../src/webhooks/Signing.js"

const secret = "whsec_c2VjcmV0LWJ5dGVzLWZvci10ZXN0aW5nLW9ubHktMDEyMzQ1Njc4OQ=="
const body = '{"event":"session.ended","sessionId":"s_1","note":"caf\u00e9 \u{1F600}"}'
const ts = 1_700_000_000

describe("signPayload", () => {
  it("is HMAC-SHA256 over `<timestamp>.<raw body>` keyed with the whole secret string, as sha256=<hex>", () => {
    const expected = createHmac("sha256", Buffer.from(secret, "utf8")).update(`${ts}.${body}`, "utf8").digest("hex")
    expect(signPayload(secret, ts, body)).toBe(`sha256=${expected}`)
    expect(signPayload(secret, String(ts), body)).toBe(`sha256=${expected}`)
  })

  it("signs bytes and the equal string alike, and the whsec_ prefix is part of the key", () => {
    expect(signPayload(secret, ts, Buffer.from(body, "utf8"))).toBe(signPayload(secret, ts, body))
    expect(signPayload(secret, ts, new Uint8Array(Buffer.from(body, "utf8")))).toBe(signPayload(secret, ts, body))
    expect(signPayload(secret.slice("whsec_".length), ts, body)).not.toBe(signPayload(secret, ts, body))
  })

  it("matches a known vector", () => {
    // Computed independently: printf '1700000000.{}' | openssl dgst -sha256 -hmac 'whsec_test'
    expect(signPayload("whsec_test", 1_700_000_000, "{}")).toBe(
      "sha256=35495024f4ef3f94e5a93e22221544c4b75e9a42300cd965ab81cb85cd994e91"
    )
  })
})

describe("verifySignature", () => {
  const signature = signPayload(secret, ts, body)
  const base = { secret, signature, timestamp: String(ts), rawBody: body, now: ts }

  it("accepts a correct signature, for string and byte bodies, with the header as Node hands it", () => {
    expect(verifySignature(base)).toBe(true)
    expect(verifySignature({ ...base, rawBody: Buffer.from(body) })).toBe(true)
    expect(verifySignature({ ...base, signature: [signature], timestamp: [String(ts)] })).toBe(true)
    expect(verifySignature({ ...base, timestamp: ts })).toBe(true)
    expect(verifySignature({ ...base, now: new Date(ts * 1000) })).toBe(true)
  })

  it("defaults `now` to the system clock", () => {
    const now = Math.floor(Date.now() / 1000)
    const fresh = { secret, signature: signPayload(secret, now, body), timestamp: String(now), rawBody: body }
    expect(verifySignature(fresh)).toBe(true)
    expect(verifySignature({ ...base, now: undefined })).toBe(false)
  })

  it("refuses when either header is missing or empty", () => {
    expect(verifySignature({ ...base, signature: undefined })).toBe(false)
    expect(verifySignature({ ...base, timestamp: undefined })).toBe(false)
    expect(verifySignature({ ...base, signature: null })).toBe(false)
    expect(verifySignature({ ...base, signature: "" })).toBe(false)
    expect(verifySignature({ ...base, timestamp: "" })).toBe(false)
    expect(verifySignature({ ...base, signature: [signature, signature] })).toBe(false)
  })

  it("refuses a timestamp that is not an integer", () => {
    for (const bad of ["1700000000.5", "1e9", "-1700000000", "abc", "0x6553f100", " "]) {
      const sig = signPayload(secret, bad, body)
      expect(verifySignature({ ...base, signature: sig, timestamp: bad }), bad).toBe(false)
    }
  })

  it("accepts within the tolerance either way and refuses beyond it (absolute difference)", () => {
    expect(verifySignature({ ...base, now: ts + 300 })).toBe(true)
    expect(verifySignature({ ...base, now: ts - 300 })).toBe(true)
    expect(verifySignature({ ...base, now: ts + 301 })).toBe(false)
    expect(verifySignature({ ...base, now: ts - 301 })).toBe(false)
    expect(verifySignature({ ...base, now: ts + 20, toleranceSeconds: 10 })).toBe(false)
    expect(verifySignature({ ...base, now: ts + 9, toleranceSeconds: 10 })).toBe(true)
  })

  it("refuses a wrong secret, a changed body, a changed timestamp, and malformed signatures", () => {
    expect(verifySignature({ ...base, secret: "whsec_other" })).toBe(false)
    expect(verifySignature({ ...base, rawBody: body.replace("s_1", "s_2") })).toBe(false)
    expect(verifySignature({ ...base, rawBody: body + " " })).toBe(false)
    expect(verifySignature({ ...base, timestamp: String(ts + 1) })).toBe(false)
    expect(verifySignature({ ...base, signature: signature.replace("sha256=", "") })).toBe(false)
    expect(verifySignature({ ...base, signature: signature.replace("sha256=", "sha1=") })).toBe(false)
    expect(verifySignature({ ...base, signature: signature.slice(0, -2) })).toBe(false)
    expect(verifySignature({ ...base, signature: `${signature.slice(0, -1)}z` })).toBe(false)
    expect(verifySignature({ ...base, secret: "" })).toBe(false)
  })

  it("accepts the hex digest in either case", () => {
    expect(verifySignature({ ...base, signature: `sha256=${signature.slice(7).toUpperCase()}` })).toBe(true)
  })
})

describe("signatureHeaders", () => {
  it("adds both headers with a secret and neither without one (unsigned requests)", () => {
    expect(signatureHeaders(secret, ts, body)).toEqual({
      "X-Service-Signature": signPayload(secret, ts, body),
      "X-Service-Timestamp": String(ts)
    })
    expect(signatureHeaders(undefined, ts, body)).toEqual({})
  })
})
