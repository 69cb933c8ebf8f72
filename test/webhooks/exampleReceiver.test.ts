import type { AddressInfo } from "node:net"
import { Agent, request } from "undici"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createReceiver } from "../../examples/receiver.js"
import { signPayload } from "../../src/webhooks/index.js"
import type { SessionEndedEvent } from "../../src/webhooks/SessionEndedEvent.js"
import { freePort } from "../support/redisServer.js"
import { TEST_CA, TLS_CERT, TLS_KEY } from "./httpsReceiver.js"
import { makeWebhookRuntime } from "./webhookRuntime.js"

const secret = "whsec_ZXhhbXBsZS1yZWNlaXZlci10ZXN0LXNlY3JldC0wMTIzNDU2Nzg5"
const agent = new Agent({ connect: { ca: TEST_CA } })

describe("examples/receiver.ts", () => {
  const processed: Array<SessionEndedEvent> = []
  const server = createReceiver({ secret, key: TLS_KEY, cert: TLS_CERT, onEvent: (event) => void processed.push(event) })
  let url: string

  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/`
  })
  afterAll(async () => {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
    await agent.close()
  })

  const event = (sessionId: string): SessionEndedEvent => ({
    event: "session.ended",
    sessionId,
    agentId: "agent_1",
    environmentId: "env_1",
    status: "completed",
    createdAt: new Date().toISOString(),
    direction: "inbound"
  })

  const post = async (body: string, headers: Record<string, string>) => {
    const res = await request(url, { dispatcher: agent, method: "POST", body, headers: { "content-type": "application/json", ...headers } })
    return { status: res.statusCode, body: (await res.body.json()) as Record<string, unknown> }
  }
  const signed = (body: string, at = Math.floor(Date.now() / 1000), key = secret) => ({
    "x-service-signature": signPayload(key, at, body),
    "x-service-timestamp": String(at)
  })

  it("accepts a correctly signed event and processes it once, acknowledging duplicates", async () => {
    const body = JSON.stringify(event("ses_once"))
    expect(await post(body, signed(body))).toEqual({ status: 200, body: { received: true } })
    expect(await post(body, signed(body))).toEqual({ status: 200, body: { duplicate: true } })
    expect(processed.filter((e) => e.sessionId === "ses_once")).toHaveLength(1)
  })

  it("answers 401 for a missing, wrong or stale signature, or a tampered body", async () => {
    const body = JSON.stringify(event("ses_bad"))
    const now = Math.floor(Date.now() / 1000)
    expect((await post(body, {})).status).toBe(401)
    expect((await post(body, { "x-service-signature": signed(body)["x-service-signature"] })).status).toBe(401)
    expect((await post(body, signed(body, now, "whsec_not_the_secret"))).status).toBe(401)
    expect((await post(body, signed(body, now - 301))).status).toBe(401)
    expect((await post(body.replace("completed", "failed"), signed(body))).status).toBe(401)
    expect(processed.some((e) => e.sessionId === "ses_bad")).toBe(false)
  })

  it("answers 400 for a signed body that is not JSON, and acknowledges unknown event kinds", async () => {
    expect((await post("not json", signed("not json"))).status).toBe(400)
    const other = JSON.stringify({ event: "session.started", sessionId: "x" })
    expect(await post(other, signed(other))).toEqual({ status: 200, body: { ignored: true } })
  })

  it("verifies a real delivery from callgate", async () => {
    const port = await freePort()
    const t = makeWebhookRuntime("memory")
    const ids = await t.createEnvironment(`https://127.0.0.1:${port}/callgate`)
    const got: Array<SessionEndedEvent> = []
    const live = createReceiver({ secret: ids.secret!, key: TLS_KEY, cert: TLS_CERT, onEvent: (e) => void got.push(e) })
    await new Promise<void>((resolve) => live.listen(port, "127.0.0.1", resolve))
    try {
      const sent = t.sessionEnded(ids)
      await t.enqueue(sent)
      const [delivery] = await t.settled(ids)
      expect(delivery!.state).toBe("delivered")
      expect(got).toEqual([sent])
    } finally {
      live.closeAllConnections()
      await new Promise((resolve) => live.close(resolve))
      await t.close()
    }
  })
})
