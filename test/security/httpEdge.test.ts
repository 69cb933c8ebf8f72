import { connect, type Socket } from "node:net"
import { Either, Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { isTelnyxMediaFrame, TelnyxMedia } from "../../src/frames/TelnyxFrames.js"
import { audioFrames, dialInAgent, type Gateway, startGateway, twilioCall, until } from "../livecall/callHarness.js"
import { ADMIN_KEY, makeTestApp, type TestApp, uniqueId } from "../support/testApp.js"
import { call, environmentsUrl, expectError } from "../http/client.js"

/** A raw TCP client: what it received, and when the server closed the connection. */
const rawClient = async (port: number) => {
  const socket: Socket = connect(port, "127.0.0.1")
  await new Promise((resolve) => socket.once("connect", resolve))
  let received = ""
  socket.on("data", (chunk) => (received += chunk.toString("latin1")))
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()))
  socket.on("error", () => {})
  return { socket, received: () => received, closed }
}

describe("HTTP timeouts on every route", () => {
  let gateway: Gateway
  let port: number
  beforeAll(async () => {
    gateway = await startGateway({ env: { HTTP_HEADERS_TIMEOUT: "500ms", HTTP_REQUEST_TIMEOUT: "1s", HTTP_KEEP_ALIVE_TIMEOUT: "500ms" } })
    port = Number(new URL(gateway.httpBase).port)
  })
  afterAll(() => gateway.close())

  it.each([
    ["/v1 with a valid key", "/v1/agents/a_1/environments", `authorization: Bearer ${ADMIN_KEY}\r\ncontent-type: application/json\r\n`],
    ["the unauthenticated Twilio voice webhook", "/telephony/twilio/voice", "content-type: application/x-www-form-urlencoded\r\n"],
    ["the Telnyx Call Control webhook", "/telephony/telnyx/call-control", "content-type: application/json\r\n"]
  ])("a body trickled byte by byte on %s is answered 408 and the connection closed", async (_name, path, headers) => {
    const client = await rawClient(port)
    client.socket.write(`POST ${path} HTTP/1.1\r\nhost: x\r\n${headers}content-length: 1000\r\n\r\n{`)
    const trickle = setInterval(() => client.socket.writable && client.socket.write(" "), 100)
    await client.closed
    clearInterval(trickle)
    expect(client.received()).toMatch(/^HTTP\/1\.1 408 /)
  })

  it("headers that never finish are answered 408 and the connection closed", async () => {
    const client = await rawClient(port)
    client.socket.write("GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
    const trickle = setInterval(() => client.socket.writable && client.socket.write("a"), 100)
    await client.closed
    clearInterval(trickle)
    expect(client.received()).toMatch(/^HTTP\/1\.1 408 /)
  })

  it("an idle keep-alive connection is closed after HTTP_KEEP_ALIVE_TIMEOUT", async () => {
    const client = await rawClient(port)
    client.socket.write("GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
    await until(() => client.received().includes('{"status":"ok"}'), "the answer")
    await client.closed
    expect(client.received()).toMatch(/^HTTP\/1\.1 200 /)
  })

  it("media streams are WebSockets, not requests: a call outlives HTTP_REQUEST_TIMEOUT", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "the agent in the pool")
    const sid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const carrier = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: sid }), callSid: sid })
    carrier.start()
    const frames = audioFrames("caller-appointment-noisy.ulaw", 125) // 2.5 s of audio, paced
    for (const frame of frames) {
      carrier.media(frame)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    await agent.waitForEvent("media", frames.length)
    expect(agent.closed).toBeUndefined()
    expect(carrier.peer.closed).toBeUndefined()
    carrier.stop()
  })
})

describe("bodies and authentication throttling", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await makeTestApp("memory", { AUTH_FAILURES_PER_MINUTE: "5", RATE_LIMIT_PER_MINUTE: "1000", CARRIER_WEBHOOK_BODY_LIMIT_BYTES: "4096" })
  })
  afterAll(() => t.close())

  const from = (remoteAddress: string, url: string, key: string | null, extra: Record<string, string> = {}) =>
    t.app.inject({ method: "GET", url, remoteAddress, headers: { ...(key === null ? {} : { authorization: `Bearer ${key}` }), ...extra } })

  it("fresh invalid keys from one address get 429 with Retry-After after the burst; a valid key from there is answered normally; other addresses are unaffected", async () => {
    const url = environmentsUrl(uniqueId("agent"))
    for (let i = 0; i < 5; i++) expect((await from("198.51.100.7", url, `cg_invalid_${i}_${uniqueId("k")}`)).statusCode).toBe(401)
    const limited = await from("198.51.100.7", url, `cg_invalid_last_${uniqueId("k")}`)
    expect(limited.statusCode).toBe(429)
    expect(limited.json().error.code).toBe("RATE_LIMITED")
    expect(Number(limited.headers["retry-after"])).toBeGreaterThan(0)
    expect((await from("198.51.100.7", url, ADMIN_KEY)).statusCode).toBe(200)
    expect((await from("198.51.100.7", url, `cg_invalid_again_${uniqueId("k")}`)).statusCode).toBe(429)
    expect((await from("198.51.100.8", url, `cg_invalid_${uniqueId("k")}`)).statusCode).toBe(401)
  })

  it("the agent WebSocket route and the carrier webhooks count failures against the same address", async () => {
    const address = "198.51.100.9"
    for (let i = 0; i < 3; i++) {
      expect((await from(address, "/v1/agents/a_1/environments/e_1/connect", `bad_${i}`, { upgrade: "websocket", connection: "upgrade", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" })).statusCode).toBe(401)
    }
    for (let i = 0; i < 2; i++) {
      expect((await from(address, environmentsUrl("a_1"), null)).statusCode).toBe(401)
    }
    expect((await from(address, environmentsUrl("a_1"), null)).statusCode).toBe(429)
    expect((await from(address, environmentsUrl("a_1"), ADMIN_KEY)).statusCode).toBe(200)
  })

  it("a URL with a malformed percent-encoding is 400 in the documented envelope, never fastify's own body", async () => {
    const answer = await t.app.inject({ method: "GET", url: "/v1/agents/%zz/environments", headers: { authorization: `Bearer ${ADMIN_KEY}` } })
    expect(answer.statusCode).toBe(400)
    expect(answer.json().error).toMatchObject({ code: "VALIDATION_FAILED", details: [] })
  })

  it("the carrier webhooks have a small body limit", async () => {
    const body = `CallSid=CA1&From=%2B14155550100&Pad=${"x".repeat(5000)}`
    const answer = await t.app.inject({ method: "POST", url: "/telephony/twilio/voice", payload: body, headers: { "content-type": "application/x-www-form-urlencoded" } })
    expect(answer.statusCode).toBe(413)
  })

  it("charset=utf-16 bodies are refused clearly (415), never read as UTF-8", async () => {
    const agentId = uniqueId("agent")
    const utf16 = Buffer.from(JSON.stringify({ name: "été" }), "utf16le")
    const json = await call(t.app, "POST", environmentsUrl(agentId), { payload: utf16, contentType: "application/json; charset=utf-16" })
    const error = expectError(json, 415, "UNSUPPORTED_MEDIA_TYPE")
    expect(error.message).toMatch(/UTF-8/)
    const form = await t.app.inject({
      method: "POST",
      url: "/telephony/twilio/voice",
      payload: Buffer.from("CallSid=CA1", "utf16le"),
      headers: { "content-type": "application/x-www-form-urlencoded; charset=UTF-16" }
    })
    expect(form.statusCode).toBe(415)
    // UTF-8, declared or not, is read as such.
    const ok = await call(t.app, "POST", environmentsUrl(agentId), { payload: Buffer.from(JSON.stringify({ name: "été" })), contentType: "application/json; charset=UTF-8" })
    expect(ok.status).toBe(201)
    expect(ok.json.data.name).toBe("été")
  })
})

describe("Telnyx chunk numbers", () => {
  const frame = (chunk: unknown) => ({ event: "media", stream_id: "s", media: { track: "inbound", chunk, timestamp: "5", payload: "AAAA" } })
  it.each(["1234567890", "999999999999999", 12345678901, 999_999_999_999_999])("chunk %j (over 9 digits) is accepted", (chunk) => {
    expect(isTelnyxMediaFrame(frame(chunk))).toBe(true)
    expect(Either.isRight(Schema.decodeUnknownEither(TelnyxMedia)(frame(chunk)))).toBe(true)
  })
  it.each(["1234567890123456", "-1", "1.5", 1.5, -1, "12a"])("chunk %j is refused", (chunk) => {
    expect(isTelnyxMediaFrame(frame(chunk))).toBe(false)
    expect(Either.isLeft(Schema.decodeUnknownEither(TelnyxMedia)(frame(chunk)))).toBe(true)
  })
})
