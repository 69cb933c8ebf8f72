import { Effect, Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Environments } from "../../src/environments/Environments.js"
import { SessionEndedEvent } from "../../src/webhooks/SessionEndedEvent.js"
import { verifySignature } from "../../src/webhooks/Signing.js"
import { type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { testWebhookSettings } from "../webhooks/webhookRuntime.js"
import { uniqueId } from "../support/testApp.js"
import { dialInAgent, type Gateway, sessionIdOf, startGateway, storedSession, twilioCall, until } from "./callHarness.js"

/**
 * The whole path on the Redis store: a call ends, and the environment's HTTPS receiver gets a
 * session.ended that verifySignature accepts with the environment's secret.
 */
describe("session.ended reaches the environment's webhook, signed (redis store)", () => {
  let gateway: Gateway
  let receiver: Receiver
  beforeAll(async () => {
    receiver = await startReceiver()
    gateway = await startGateway({ store: "redis", env: testWebhookSettings })
  })
  afterAll(async () => {
    await gateway.close()
    await receiver.close()
  })

  const call = async () => {
    const agentId = uniqueId("agent")
    const created = await gateway.run(
      Effect.flatMap(Environments, (envs) => envs.create(agentId, { name: "hooked", webhookUrl: receiver.url("/events") }))
    )
    const agent = await dialInAgent(gateway, agentId, created.id)
    await until(() => gateway.idleAgents(agentId, created.id) === 1, "idle agent")
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const stream = await twilioCall(gateway, {
      token: gateway.issueToken({ agentId, environmentId: created.id, kind: "twilio", callId: callSid, from: "+14155550100", to: "+14155550111" }),
      callSid
    })
    stream.start()
    await agent.waitForEvent("start")
    return { agentId, secret: created.webhookSecret!, agent, stream, callSid, sessionId: sessionIdOf(agent) }
  }

  const delivered = async (sessionId: string) => {
    await until(() => receiver.requests.some((r) => r.body.toString().includes(sessionId)), `delivery of ${sessionId}`, 30_000)
    return receiver.requests.find((r) => r.body.toString().includes(sessionId))!
  }

  it("a completed call", async () => {
    const { agentId, secret, stream, callSid, sessionId } = await call()
    stream.stop()
    const request = await delivered(sessionId)
    expect(request.method).toBe("POST")
    expect(verifySignature({ secret, signature: request.headers["x-service-signature"], timestamp: request.headers["x-service-timestamp"], rawBody: request.body })).toBe(true)
    const event = Schema.decodeUnknownSync(SessionEndedEvent)(JSON.parse(request.body.toString()))
    expect(event).toMatchObject({
      event: "session.ended",
      sessionId,
      agentId,
      status: "completed",
      direction: "inbound",
      agentPhoneNumber: "+14155550111",
      clientPhoneNumber: "+14155550100",
      provider: "twilio",
      callId: callSid,
      endReason: "caller_hangup"
    })
    expect(event.duration).toMatch(/^\d+$/)
    expect((await storedSession(gateway, agentId, sessionId)).status).toBe("completed")
  })

  it("a failed call", async () => {
    const { secret, agent, sessionId } = await call()
    agent.send({ event: "error", error: { message: "boom" } })
    const request = await delivered(sessionId)
    expect(verifySignature({ secret, signature: request.headers["x-service-signature"], timestamp: request.headers["x-service-timestamp"], rawBody: request.body })).toBe(true)
    expect(JSON.parse(request.body.toString())).toMatchObject({ sessionId, status: "failed", endReason: "agent_error" })
  })
})
