import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { twilioSignature } from "../../support/fakeTwilio.js"
import type { StoreKind } from "../../support/testApp.js"
import { type EntryTestApp, formBody, makeEntryTestApp, PUBLIC_URL, tokenIn, XML } from "./entryTestApp.js"

const AUTH_TOKEN = "twilio-test-auth-token-01"
const ACCOUNT = "AC00000000000000000000000000000042"

const callForm = (overrides: Record<string, string> = {}) => ({
  CallSid: "CA1234567890abcdef1234567890abcdef",
  AccountSid: ACCOUNT,
  From: "+14155550100",
  To: "+14155550111",
  Direction: "inbound",
  CallStatus: "ringing",
  ApiVersion: "2010-04-01",
  ...overrides
})

describe.each<StoreKind>(["memory", "redis"])("POST /telephony/twilio/voice (%s store)", (kind) => {
  let t: EntryTestApp
  beforeAll(async () => {
    t = await makeEntryTestApp({ TWILIO_AUTH_TOKEN: AUTH_TOKEN, TWILIO_ACCOUNT_SID: ACCOUNT }, kind)
  })
  afterAll(() => t.close())

  const path = () => `/telephony/twilio/voice?agentId=${t.agentId}&environmentId=${t.environmentId}`
  const post = (url: string, form: Record<string, string>, signature: string | undefined) =>
    t.app.inject({
      method: "POST",
      url,
      payload: formBody(form),
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        host: "internal-lb:8080",
        ...(signature !== undefined ? { "x-twilio-signature": signature } : {})
      }
    })

  it("answers <Connect><Stream> with every parameter and a session token for the call", async () => {
    const form = callForm()
    const res = await post(path(), form, twilioSignature(AUTH_TOKEN, PUBLIC_URL + path(), form))
    expect(res.statusCode).toBe(200)
    expect(res.headers["content-type"]).toBe("text/xml; charset=utf-8")
    const token = tokenIn(res.body)
    const sessionId = (await t.claimsOf(token))?.entrySessionId
    expect(sessionId).toMatch(/^ses_[A-Za-z0-9_-]{16}$/)
    expect(res.body).toBe(
      `${XML}<Response><Connect><Stream url="wss://callgate.test/telephony/twilio/stream">` +
        `<Parameter name="token" value="${token}"/>` +
        `<Parameter name="agentId" value="${t.agentId}"/>` +
        `<Parameter name="environmentId" value="${t.environmentId}"/>` +
        `<Parameter name="from" value="+14155550100"/>` +
        `<Parameter name="to" value="+14155550111"/>` +
        `<Parameter name="direction" value="inbound"/>` +
        `</Stream></Connect>` +
        // When the stream ends the call goes on here; any instance answers it (docs/reliability.md).
        `<Redirect method="POST">https://callgate.test/telephony/twilio/after-stream?agentId=${t.agentId}&amp;environmentId=${t.environmentId}&amp;sessionId=${sessionId}</Redirect>` +
        `</Response>`
    )
    expect(await t.claimsOf(token)).toMatchObject({
      agentId: t.agentId,
      environmentId: t.environmentId,
      kind: "twilio",
      callId: "CA1234567890abcdef1234567890abcdef",
      from: "+14155550100",
      to: "+14155550111",
      direction: "inbound",
      accountSid: ACCOUNT
    })
  })

  it("outbound-api and outbound-dial calls are outbound", async () => {
    for (const Direction of ["outbound-api", "outbound-dial"]) {
      const form = callForm({ Direction })
      const res = await post(path(), form, twilioSignature(AUTH_TOKEN, PUBLIC_URL + path(), form))
      expect(res.body).toContain('<Parameter name="direction" value="outbound"/>')
      expect((await t.claimsOf(tokenIn(res.body)))?.direction).toBe("outbound")
    }
  })

  it("extra query parameters are the agent's custom parameters, carried in the signed session token", async () => {
    const url = `${path()}&lang=es&crm.id=42&agentId_hint=x`
    const form = callForm()
    const res = await post(url, form, twilioSignature(AUTH_TOKEN, PUBLIC_URL + url, form))
    expect(res.statusCode).toBe(200)
    const token = tokenIn(res.body)
    expect((await t.claimsOf(token))?.customParameters).toEqual({ lang: "es", "crm.id": "42", agentId_hint: "x" })
    // Not as <Parameter>s: only the token carries them (Telnyx streams have no parameters to rely on).
    expect(res.body).not.toContain("lang")
  })

  it("a URL without custom parameters issues a token without the field", async () => {
    const form = callForm()
    const res = await post(path(), form, twilioSignature(AUTH_TOKEN, PUBLIC_URL + path(), form))
    expect(await t.claimsOf(tokenIn(res.body))).not.toHaveProperty("customParameters")
  })

  it.each([
    ["a name with a space", "&my%20name=1"],
    ["__proto__", "&__proto__=1"],
    ["a name given twice", "&lang=es&lang=en"],
    ["a value over 256 characters", `&note=${"x".repeat(257)}`],
    ["more than 10 parameters", Array.from({ length: 11 }, (_, i) => `&p${i}=v`).join("")],
    ["more than 1024 characters in all", Array.from({ length: 5 }, (_, i) => `&p${i}=${"v".repeat(250)}`).join("")]
  ])("custom parameters out of bounds (%s) are refused with 400", async (_name, extra) => {
    const url = `${path()}${extra}`
    const form = callForm()
    const res = await post(url, form, twilioSignature(AUTH_TOKEN, PUBLIC_URL + url, form))
    expect(res.statusCode).toBe(400)
    expect(res.body).toBe(`${XML}<Response><Hangup/></Response>`)
  })

  it("an unknown environment hears a refusal and the call ends", async () => {
    const url = `/telephony/twilio/voice?agentId=${t.agentId}&environmentId=env_missing`
    const form = callForm()
    const res = await post(url, form, twilioSignature(AUTH_TOKEN, PUBLIC_URL + url, form))
    expect(res.statusCode).toBe(200)
    expect(res.body).toBe(`${XML}<Response><Say>This number is not in service.</Say><Hangup/></Response>`)
  })
})

describe("POST /telephony/twilio/voice: X-Twilio-Signature", () => {
  let t: EntryTestApp
  beforeAll(async () => {
    t = await makeEntryTestApp({ TWILIO_AUTH_TOKEN: AUTH_TOKEN })
  })
  afterAll(() => t.close())

  const path = () => `/telephony/twilio/voice?agentId=${t.agentId}&environmentId=${t.environmentId}`
  const post = (form: Record<string, string>, headers: Record<string, string>) =>
    t.app.inject({ method: "POST", url: path(), payload: formBody(form), headers: { "content-type": "application/x-www-form-urlencoded", ...headers } })
  const refused = `${XML}<Response><Hangup/></Response>`

  it.each([
    ["no signature", () => ({})],
    ["a signature made with another auth token", () => ({ "x-twilio-signature": twilioSignature("someone-elses-token", PUBLIC_URL + path(), callForm()) })],
    ["a signature over other form values", () => ({ "x-twilio-signature": twilioSignature(AUTH_TOKEN, PUBLIC_URL + path(), callForm({ From: "+19995550100" })) })],
    ["a signature over the URL without its query", () => ({ "x-twilio-signature": twilioSignature(AUTH_TOKEN, `${PUBLIC_URL}/telephony/twilio/voice`, callForm()) })],
    [
      "a signature over the URL a proxy header names (never trusted)",
      () => ({
        host: "evil.test",
        "x-forwarded-host": "evil.test",
        "x-forwarded-proto": "https",
        "x-twilio-signature": twilioSignature(AUTH_TOKEN, `https://evil.test${path()}`, callForm())
      })
    ]
  ])("refuses %s with 401", async (_name, headers) => {
    const res = await post(callForm(), headers())
    expect(res.statusCode).toBe(401)
    expect(res.body).toBe(refused)
  })

  it("checks the signature before reading the request (a bad query still gets 401)", async () => {
    const res = await t.app.inject({ method: "POST", url: "/telephony/twilio/voice", payload: formBody(callForm()), headers: { "content-type": "application/x-www-form-urlencoded" } })
    expect(res.statusCode).toBe(401)
  })

  it.each([
    ["no CallSid", (f: Record<string, string>) => Object.fromEntries(Object.entries(f).filter(([k]) => k !== "CallSid")), "?agentId=a&environmentId=b"],
    ["no agentId", (f: Record<string, string>) => f, "?environmentId=b"],
    ["an agentId with forbidden characters", (f: Record<string, string>) => f, "?agentId=a%2F..%2Fb&environmentId=b"]
  ])("a signed but malformed request (%s) is 400", async (_name, edit, query) => {
    const url = `/telephony/twilio/voice${query}`
    const form = edit(callForm())
    const res = await t.app.inject({
      method: "POST",
      url,
      payload: formBody(form),
      headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": twilioSignature(AUTH_TOKEN, PUBLIC_URL + url, form) }
    })
    expect(res.statusCode).toBe(400)
    expect(res.body).toBe(refused)
  })
})

describe("POST /telephony/twilio/voice without TWILIO_AUTH_TOKEN, over http://", () => {
  let t: EntryTestApp
  beforeAll(async () => {
    t = await makeEntryTestApp({ PUBLIC_URL: "http://localhost:8080" })
  })
  afterAll(() => t.close())

  it("accepts unsigned webhooks and points the stream at ws://", async () => {
    const res = await t.app.inject({
      method: "POST",
      url: `/telephony/twilio/voice?agentId=${t.agentId}&environmentId=${t.environmentId}`,
      payload: formBody(callForm()),
      headers: { "content-type": "application/x-www-form-urlencoded" }
    })
    expect(res.statusCode).toBe(200)
    expect(res.body).toContain('<Stream url="ws://localhost:8080/telephony/twilio/stream">')
  })
})
