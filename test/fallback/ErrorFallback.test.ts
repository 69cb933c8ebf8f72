import { Effect, Layer, ManagedRuntime } from "effect"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { Environments } from "../../src/environments/Environments.js"
import { ErrorFallback } from "../../src/fallback/ErrorFallback.js"
import type { FallbackRecord } from "../../src/fallback/FallbackRecord.js"
import { RescueLive } from "../../src/layers.js"
import { Metrics } from "../../src/observability/Metrics.js"
import { HardError } from "../../src/kernel/HardError.js"
import type { SessionInfo } from "../../src/kernel/SessionInfo.js"
import type { CallKind } from "../../src/kernel/Carrier.js"
import { verifySignature } from "../../src/webhooks/Signing.js"
import { type FakeTelnyx, startFakeTelnyx } from "../support/fakeTelnyx.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { domainLayer, uniqueId } from "../support/testApp.js"
import { CA_FILE, type Receiver, type Reply, startReceiver } from "../webhooks/httpsReceiver.js"

let twilio: FakeTwilio
let telnyx: FakeTelnyx
let runtime: ManagedRuntime.ManagedRuntime<ErrorFallback | Environments | Metrics, unknown>
let receiver: Receiver
let nextReply: Reply | "hang" = { status: 200 }

beforeAll(async () => {
  twilio = await startFakeTwilio()
  telnyx = await startFakeTelnyx()
  receiver = await startReceiver(() => nextReply)
  runtime = ManagedRuntime.make(
    RescueLive.pipe(
      Layer.provideMerge(
        domainLayer("memory", {
          ...twilio.env,
          ...telnyx.env,
          WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
          WEBHOOK_CA_FILE: CA_FILE,
          FALLBACK_WEBHOOK_TIMEOUT: "1s"
        })
      )
    )
  )
})

afterAll(async () => {
  await runtime.dispose()
  await Promise.all([twilio.close(), telnyx.close(), receiver.close()])
})

afterEach(() => {
  twilio.reset()
  telnyx.reset()
  receiver.requests.length = 0
  nextReply = { status: 200 }
})

const AGENT_NUMBER = "+14155550199"
const CALLER = "+14155550100"

const sessionFor = (agentId: string, environmentId: string, kind: CallKind = "twilio"): SessionInfo & { streamSid: string } => {
  const callId = uniqueId(kind === "twilio" ? "CA" : "v3")
  return {
    sessionId: uniqueId("ses"),
    agentId,
    environmentId,
    provider: kind === "twilio" ? "twilio" : "telnyx",
    call: { kind, callId, accountSid: kind === "twilio" ? twilio.accountSid : kind === "telnyx-texml" ? "acct-texml" : undefined },
    from: CALLER,
    to: AGENT_NUMBER,
    direction: "inbound",
    createdAt: new Date(),
    streamSid: uniqueId("MZ")
  }
}

/** An environment configured through the same service /v1 uses. */
const environment = (patch: Parameters<Environments["update"]>[2]) =>
  runtime.runPromise(
    Effect.gen(function* () {
      const envs = yield* Environments
      const agentId = uniqueId("agent")
      const created = yield* envs.create(agentId, { name: "fallback" })
      const updated = yield* envs.update(agentId, created.id, patch)
      return { agentId, environmentId: created.id, view: updated }
    })
  )

const rescue = (session: SessionInfo, error = new HardError({ kind: "agent_disconnected", message: "the agent's socket closed mid-call" })) =>
  runtime.runPromise(Effect.flatMap(ErrorFallback, (r) => r.rescue(session, error))).then((outcome) => outcome.fallback as FallbackRecord)

const webhookEnvironment = () =>
  environment({ errorFallbackType: "webhook", errorFallbackValue: receiver.url("/fallback?tenant=acme") })

describe("error fallback: disabled", () => {
  it("fails the session and ends the Twilio call with Status=completed", async () => {
    const { agentId, environmentId } = await environment({})
    const session = sessionFor(agentId, environmentId)
    const record = await rescue(session)
    expect(record).toMatchObject({ trigger: "agent_disconnected", type: "disabled", outcome: "hung_up" })
    const updates = twilio.callUpdates(session.call.callId)
    expect(updates).toHaveLength(1)
    expect(updates[0]!.path).toBe(`/2010-04-01/Accounts/${twilio.accountSid}/Calls/${session.call.callId}.json`)
    expect(updates[0]!.form).toEqual({ Status: "completed" })
    expect(updates[0]!.headers.authorization).toBe(`Basic ${Buffer.from(`${twilio.accountSid}:${twilio.authToken}`).toString("base64")}`)
  })

  it("hangs up a Telnyx Call Control call with the hangup command", async () => {
    const { agentId, environmentId } = await environment({})
    const session = sessionFor(agentId, environmentId, "telnyx-call-control")
    expect(await rescue(session)).toMatchObject({ outcome: "hung_up" })
    const commands = telnyx.commands(session.call.callId, "hangup")
    expect(commands).toHaveLength(1)
    expect(commands[0]!.headers.authorization).toBe(`Bearer ${telnyx.apiKey}`)
  })
})

describe("error fallback: phone", () => {
  it("transfers a Twilio call with <Dial> to the number, caller id the agent's number", async () => {
    const { agentId, environmentId } = await environment({ errorFallbackType: "phone", errorFallbackValue: "+14155550123" })
    const session = sessionFor(agentId, environmentId)
    const record = await rescue(session)
    expect(record).toMatchObject({ type: "phone", outcome: "transferred", webhookStatus: null })
    expect(record.carrierRequestAt).not.toBeNull()
    const updates = twilio.callUpdates(session.call.callId)
    expect(updates).toHaveLength(1)
    expect(updates[0]!.form).toEqual({
      Twiml: `<?xml version="1.0" encoding="UTF-8"?><Response><Dial callerId="${AGENT_NUMBER}">+14155550123</Dial></Response>`
    })
  })

  it("transfers a Telnyx Call Control call with the transfer command", async () => {
    const { agentId, environmentId } = await environment({ errorFallbackType: "phone", errorFallbackValue: "+14155550123" })
    const session = sessionFor(agentId, environmentId, "telnyx-call-control")
    expect(await rescue(session)).toMatchObject({ outcome: "transferred" })
    const transfer = telnyx.commands(session.call.callId, "transfer")
    expect(transfer).toHaveLength(1)
    expect(transfer[0]!.json).toMatchObject({ to: "+14155550123", from: AGENT_NUMBER })
  })

  it("transfers a Telnyx TeXML call with a TeXML update holding <Dial>", async () => {
    const { agentId, environmentId } = await environment({ errorFallbackType: "phone", errorFallbackValue: "+14155550123" })
    const session = sessionFor(agentId, environmentId, "telnyx-texml")
    expect(await rescue(session)).toMatchObject({ outcome: "transferred" })
    const updates = telnyx.texmlUpdates(session.call.callId)
    expect(updates).toHaveLength(1)
    expect(JSON.stringify(updates[0]!.json ?? updates[0]!.form)).toContain("<Dial")
    expect(JSON.stringify(updates[0]!.json ?? updates[0]!.form)).toContain("+14155550123")
  })

  it("ends the call when the carrier refuses the transfer", async () => {
    const { agentId, environmentId } = await environment({ errorFallbackType: "phone", errorFallbackValue: "+14155550123" })
    const session = sessionFor(agentId, environmentId)
    twilio.failNext({ status: 400, code: 21211, message: "invalid number" })
    const record = await rescue(session)
    expect(record.outcome).toBe("carrier_failed")
    expect(twilio.callUpdates(session.call.callId).at(-1)!.form).toEqual({ Status: "completed" })
  })
})

describe("error fallback: webhook request", () => {
  it("POSTs value?error=<message> with the call's parameters, signed with the current secret", async () => {
    const { agentId, environmentId, view } = await webhookEnvironment()
    const session = sessionFor(agentId, environmentId)
    nextReply = { status: 200, headers: { "content-type": "text/xml" }, body: "<Response><Say>Sorry.</Say></Response>" }
    await rescue(session, new HardError({ kind: "agent_unresponsive", message: "the agent did not answer in time" }))
    expect(receiver.requests).toHaveLength(1)
    const request = receiver.requests[0]!
    expect(request.method).toBe("POST")
    expect(request.path).toBe("/fallback?tenant=acme&error=the%20agent%20did%20not%20answer%20in%20time")
    expect(request.headers["content-type"]).toBe("application/json")
    expect(JSON.parse(request.body.toString())).toEqual({
      CallSid: session.call.callId,
      ErrorMessage: "the agent did not answer in time",
      AccountSid: twilio.accountSid,
      From: CALLER,
      To: AGENT_NUMBER,
      Direction: "inbound",
      CallStatus: "in-progress",
      StreamSid: session.streamSid,
      SessionId: session.sessionId,
      AgentId: agentId,
      EnvironmentId: environmentId,
      Provider: "twilio"
    })
    expect(
      verifySignature({
        secret: view.errorFallbackWebhookSecret!,
        signature: request.headers["x-service-signature"] as string,
        timestamp: request.headers["x-service-timestamp"] as string,
        rawBody: request.body
      })
    ).toBe(true)
  })

  it.each(["standard", "both"] as const)("keeps the interface's scheme when the event webhooks' scheme is %s", async (webhookSignatureScheme) => {
    const { agentId, environmentId, view } = await environment({
      errorFallbackType: "webhook",
      errorFallbackValue: receiver.url("/fallback"),
      webhookSignatureScheme
    })
    expect(view.webhookSignatureScheme).toBe(webhookSignatureScheme)
    await rescue(sessionFor(agentId, environmentId))
    const request = receiver.requests[0]!
    expect(request.headers["webhook-signature"]).toBeUndefined()
    expect(request.headers["webhook-id"]).toBeUndefined()
    expect(
      verifySignature({
        secret: view.errorFallbackWebhookSecret!,
        signature: request.headers["x-service-signature"] as string,
        timestamp: request.headers["x-service-timestamp"] as string,
        rawBody: request.body
      })
    ).toBe(true)
  })

  it("goes unsigned once the secret is cleared", async () => {
    const { agentId, environmentId } = await environment({
      errorFallbackType: "webhook",
      errorFallbackValue: receiver.url("/fallback")
    })
    await runtime.runPromise(Effect.flatMap(Environments, (envs) => envs.update(agentId, environmentId, { errorFallbackWebhookSecret: null })))
    await rescue(sessionFor(agentId, environmentId))
    expect(receiver.requests[0]!.headers["x-service-signature"]).toBeUndefined()
    expect(receiver.requests[0]!.headers["x-service-timestamp"]).toBeUndefined()
  })

  it("after a regenerate, signs with the new secret and the old one no longer verifies", async () => {
    const { agentId, environmentId, view } = await webhookEnvironment()
    const fresh = await runtime.runPromise(
      Effect.flatMap(Environments, (envs) => envs.regenerateErrorFallbackWebhookSecret(agentId, environmentId))
    )
    await rescue(sessionFor(agentId, environmentId))
    const request = receiver.requests[0]!
    const check = (secret: string) =>
      verifySignature({
        secret,
        signature: request.headers["x-service-signature"] as string,
        timestamp: request.headers["x-service-timestamp"] as string,
        rawBody: request.body
      })
    expect(check(fresh)).toBe(true)
    expect(check(view.errorFallbackWebhookSecret!)).toBe(false)
  })
})

describe("error fallback: webhook answers (docs/fallback.md, The fallback webhook)", () => {
  const xml = (inner: string) => `<?xml version="1.0" encoding="UTF-8"?><Response>${inner}</Response>`

  it.each([
    ["<Say>", xml("<Say>We are connecting you to a person.</Say>")],
    ["<Dial>", xml("<Dial>+14155550123</Dial>")],
    ["<Redirect>", xml(`<Redirect method="POST">https://example.com/ivr</Redirect>`)]
  ])("a 2xx TwiML document with %s is applied to the live Twilio call", async (_verb, twiml) => {
    const { agentId, environmentId } = await webhookEnvironment()
    const session = sessionFor(agentId, environmentId)
    nextReply = { status: 200, headers: { "content-type": "application/xml" }, body: twiml }
    const record = await rescue(session)
    expect(record).toMatchObject({ type: "webhook", outcome: "markup_applied", webhookStatus: 200 })
    expect(twilio.callUpdates(session.call.callId).map((r) => r.form)).toEqual([{ Twiml: twiml }])
  })

  it("TwiML is applied to a Telnyx TeXML call with a TeXML update", async () => {
    const { agentId, environmentId } = await webhookEnvironment()
    const session = sessionFor(agentId, environmentId, "telnyx-texml")
    nextReply = { status: 200, body: xml("<Say>Hold on.</Say>") }
    expect(await rescue(session)).toMatchObject({ outcome: "markup_applied" })
    expect(JSON.stringify(telnyx.texmlUpdates(session.call.callId)[0]!.json ?? telnyx.texmlUpdates(session.call.callId)[0]!.form)).toContain(
      "Hold on."
    )
  })

  it("TwiML <Dial> is translated to a transfer command on a Telnyx Call Control call", async () => {
    const { agentId, environmentId } = await webhookEnvironment()
    const session = sessionFor(agentId, environmentId, "telnyx-call-control")
    nextReply = { status: 200, body: xml("<Dial>+14155550123</Dial>") }
    expect(await rescue(session)).toMatchObject({ outcome: "markup_applied" })
    expect(telnyx.commands(session.call.callId, "transfer")[0]!.json).toMatchObject({ to: "+14155550123" })
  })

  const endsTheCall = async (reply: Reply | "hang", outcome: string, webhookStatus: number | null) => {
    const { agentId, environmentId } = await webhookEnvironment()
    const session = sessionFor(agentId, environmentId)
    nextReply = reply
    const record = await rescue(session)
    expect(record).toMatchObject({ type: "webhook", outcome, webhookStatus })
    expect(twilio.callUpdates(session.call.callId).map((r) => r.form)).toEqual([{ Status: "completed" }])
    return record
  }

  it("XML without a <Response> root is unexpected: the call is ended", () =>
    endsTheCall({ status: 200, body: "<Foo><Say>x</Say></Foo>" }, "unexpected_response", 200))
  it("JSON is unexpected: the call is ended", () =>
    endsTheCall({ status: 200, headers: { "content-type": "application/json" }, body: `{"say":"hi"}` }, "unexpected_response", 200))
  it("an empty 200 is unexpected: the call is ended", () => endsTheCall({ status: 200 }, "unexpected_response", 200))
  it("an oversized body is unexpected: the call is ended", () =>
    endsTheCall({ status: 200, body: xml(`<Say>${"a".repeat(70 * 1024)}</Say>`) }, "unexpected_response", 200))
  it("302 is a webhook failure (redirects are not followed): the call is ended", async () => {
    await endsTheCall({ status: 302, headers: { location: "https://127.0.0.1:1/elsewhere" } }, "webhook_failed", 302)
    expect(receiver.requests).toHaveLength(1)
  })
  it("404 is a webhook failure: the call is ended", () => endsTheCall({ status: 404 }, "webhook_failed", 404))
  it("500 is a webhook failure: the call is ended", () => endsTheCall({ status: 500, body: xml("<Say>x</Say>") }, "webhook_failed", 500))
  it("a receiver slower than FALLBACK_WEBHOOK_TIMEOUT is a webhook failure: the call is ended", async () => {
    // The receiver never answers: only the timeout can end the wait, and the record says so.
    const record = await endsTheCall("hang", "webhook_failed", null)
    expect(record.detail).toMatch(/no response within 1s|did not answer in time/)
  })

  it("a refused connection is a webhook failure: the call is ended", async () => {
    const { agentId, environmentId } = await environment({
      errorFallbackType: "webhook",
      errorFallbackValue: "https://127.0.0.1:1/fallback"
    })
    const session = sessionFor(agentId, environmentId)
    const record = await rescue(session)
    expect(record).toMatchObject({ outcome: "webhook_failed", webhookStatus: null })
    expect(record.detail).toMatch(/connection/)
    expect(twilio.callUpdates(session.call.callId).map((r) => r.form)).toEqual([{ Status: "completed" }])
  })
})

describe("error fallback metrics", () => {
  it("counts fallbacks by trigger, type and outcome and times the carrier request", async () => {
    const { agentId, environmentId } = await environment({})
    await rescue(sessionFor(agentId, environmentId), new HardError({ kind: "no_idle_agent", message: "no agent" }))
    const text = await runtime.runPromise(Effect.flatMap(Metrics, (m) => Effect.promise(() => m.registry.metrics())))
    expect(text).toMatch(/callgate_fallbacks_total\{trigger="no_idle_agent",type="disabled",outcome="hung_up"\} 1/)
    expect(text).toMatch(/callgate_fallback_carrier_request_delay_seconds_count\{trigger="no_idle_agent"\} 1/)
  })
})
