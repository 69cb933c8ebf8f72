import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { CallKind } from "../../src/kernel/Carrier.js"
import { TelnyxTwimlRunner } from "../../src/carriers/TelnyxTwimlRunner.js"
import { verifySignature } from "../../src/webhooks/Signing.js"
import { type Gateway, startGateway, until } from "../livecall/callHarness.js"
import { CA_FILE, type Receiver, type ReceivedRequest, startReceiver } from "../webhooks/httpsReceiver.js"
import {
  AGENT_NUMBER,
  api,
  breakCarrierStream,
  CALL_KINDS,
  CALLER,
  CALLER_SPEECH,
  carrierRequestsFor,
  completeTransfer,
  createEnvironment,
  endedEventsFor,
  expectCarrierRequest,
  FALLBACK_NUMBER,
  fallbackGatewayEnv,
  getSession,
  type LiveCall,
  placeCall,
  speakThenListen,
  type TestEnvironment,
  TEXML_ACCOUNT,
  waitForEnded
} from "./liveCalls.js"

/**
 * The error fallback end to end: callgate in-process with the production wiring (real
 * relay, turn timing and breaker, ErrorFallbackLive), carriers and agents over real WebSockets,
 * carrier REST at fake Twilio and Telnyx servers, the fallback webhook at a real HTTPS receiver.
 * Every trigger on every carrier kind, with every fallback type.
 */

const TRIGGERS = ["agent_disconnected", "carrier_stream_error", "no_idle_agent", "agent_unresponsive"] as const
type Trigger = (typeof TRIGGERS)[number]
const TYPES = ["disabled", "phone", "webhook"] as const
type FallbackType = (typeof TYPES)[number]

/** What the fallback webhook answers: TwiML that speaks, then moves the call to a person. */
const SORRY = "Sorry, something went wrong. Connecting you to a person."
const WEBHOOK_TWIML = `<?xml version="1.0" encoding="UTF-8"?><Response><Say>${SORRY}</Say><Dial callerId="${AGENT_NUMBER}">${FALLBACK_NUMBER}</Dial></Response>`

let receiver: Receiver
beforeAll(async () => {
  receiver = await startReceiver(() => ({ status: 200, headers: { "content-type": "text/xml" }, body: WEBHOOK_TWIML }))
})
afterAll(() => receiver.close())

/** Each environment's webhook has its own path, so its requests are told apart from others'. */
const webhookPath = () => `/fallback/${Math.random().toString(36).slice(2)}`
const webhookRequests = (path: string): Array<ReceivedRequest> => receiver.requests.filter((r) => r.path.startsWith(`${path}?`))

const fallbackSettings = (type: FallbackType, path: string) =>
  type === "disabled"
    ? {}
    : type === "phone"
      ? { errorFallbackType: "phone", errorFallbackValue: FALLBACK_NUMBER }
      : { errorFallbackType: "webhook", errorFallbackValue: receiver.url(`${path}?tenant=acme`) }

/** The error sentence each trigger produces (the fallback webhook's ErrorMessage). */
const expectedMessage = (trigger: Trigger, kind: CallKind, env: TestEnvironment): string | RegExp => {
  switch (trigger) {
    case "agent_disconnected":
      return /^The agent (closed its connection during the call \(code \d+\)|connection failed: .+)$/
    case "carrier_stream_error":
      return kind === "twilio" ? /^Twilio stream socket failed: .+/ : "Telnyx stream error (code 100002): An unknown error has occurred"
    case "no_idle_agent":
      return `No agent connection was idle for environment ${env.environmentId} of agent ${env.agentId}.`
    case "agent_unresponsive":
      return "The agent did not begin responding within 1 s of the caller's input: 1 no-response occurrence in the environment's time window reached the threshold of 1."
  }
}

const signatureOf = (request: ReceivedRequest, secret: string) =>
  verifySignature({
    secret,
    signature: request.headers["x-service-signature"] as string | undefined,
    timestamp: request.headers["x-service-timestamp"] as string | undefined,
    rawBody: request.body
  })

describe.each(CALL_KINDS)("error fallback end to end: %s calls", (kind) => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: fallbackGatewayEnv(CA_FILE) })
  })
  afterAll(() => gateway.close())

  /** Fails the live call with `trigger`; returns a cleanup. */
  const fire = async (trigger: Trigger, call: LiveCall): Promise<() => void> => {
    switch (trigger) {
      case "agent_disconnected":
      case "carrier_stream_error":
        // Mid-call: the agent is hearing the caller.
        call.carrier.media(CALLER_SPEECH[0]!)
        await call.agent!.waitForEvent("media")
        if (trigger === "agent_disconnected") call.agent!.close()
        else breakCarrierStream(call)
        return () => {}
      case "no_idle_agent":
        // Nothing to do: no agent socket was waiting when the stream started.
        return () => {}
      case "agent_unresponsive":
        // A caller turn of real speech; the agent stays silent past the 1 s timeout.
        return speakThenListen(call)
    }
  }

  /** The call's fallback webhook request, checked field by field; returns it. */
  const expectWebhookRequest = (path: string, env: TestEnvironment, call: LiveCall, session: any): ReceivedRequest => {
    const requests = webhookRequests(path)
    expect(requests).toHaveLength(1)
    const request = requests[0]!
    const message: string = session.fallback.errorMessage
    expect(request.method).toBe("POST")
    // The URL's own query is kept and `error` appended, percent-encoded (the URL serializer also
    // encodes the apostrophe as %27, which encodeURIComponent leaves alone): it decodes exactly.
    const [target, query] = request.path.split("?") as [string, string]
    expect(target).toBe(path)
    const [tenant, error, ...rest] = query.split("&")
    expect([tenant, rest]).toEqual(["tenant=acme", []])
    expect(error).toMatch(/^error=[A-Za-z0-9\-_.!~*'()%]+$/)
    expect(decodeURIComponent(error!.slice("error=".length))).toBe(message)
    expect(new URL(request.path, "https://x").searchParams.get("error")).toBe(message)
    expect(request.headers["content-type"]).toBe("application/json")
    expect(JSON.parse(request.body.toString())).toEqual({
      CallSid: call.callId,
      ErrorMessage: message,
      AccountSid: kind === "twilio" ? gateway.twilio.accountSid : kind === "telnyx-texml" ? TEXML_ACCOUNT : "",
      From: CALLER,
      To: AGENT_NUMBER,
      Direction: "inbound",
      CallStatus: "in-progress",
      StreamSid: call.carrier.streamId,
      SessionId: session.id,
      AgentId: env.agentId,
      EnvironmentId: env.environmentId,
      Provider: kind === "twilio" ? "twilio" : "telnyx"
    })
    return request
  }

  /** The Call Control translation of WEBHOOK_TWIML: speak, then (once the speech ended) transfer. */
  const expectTranslatedCommands = async (call: LiveCall) => {
    const [speak] = carrierRequestsFor(gateway, call.callId)
    expect(decodeURIComponent(speak!.path)).toBe(`/v2/calls/${call.callId}/actions/speak`)
    expect(speak!.headers.authorization).toBe(`Bearer ${gateway.telnyx.apiKey}`)
    expect(speak!.json).toEqual({ payload: SORRY, voice: "female", command_id: expect.any(String) })
    // Telnyx reports call.speak.ended; the document goes on with its <Dial>.
    await gateway.run(Effect.flatMap(TelnyxTwimlRunner, (runner) => runner.callProgress(call.callId, "speak.ended")))
    await until(() => carrierRequestsFor(gateway, call.callId).length === 2, "the transfer command")
    expectCarrierRequest(gateway, call, carrierRequestsFor(gateway, call.callId)[1]!, { dial: FALLBACK_NUMBER, callerId: AGENT_NUMBER })
  }

  describe.each(TRIGGERS)("trigger %s", (trigger) => {
    it.each(TYPES)("fallback type %s", async (type) => {
      const path = webhookPath()
      const env = await createEnvironment(gateway, {
        ...fallbackSettings(type, path),
        ...(trigger === "agent_unresponsive" ? { errorFallbackTimeout: 1, errorFallbackOccurrenceThreshold: 1 } : {})
      })
      const call = await placeCall(gateway, env, kind, trigger !== "no_idle_agent")
      const cleanup = await fire(trigger, call)
      try {
        // A phone fallback's session.ended waits for the transfer's outcome (docs/fallback.md, "Transfer outcomes").
        if (type === "phone") await completeTransfer(gateway, call, env.agentId)
        const ended = await waitForEnded(gateway, call.callId)
        expect(ended).toMatchObject({ status: "failed", endReason: trigger, callId: call.callId })

        // The session as /v1 shows it: failed, the trigger as endReason, the fallback recorded.
        const session = await getSession(gateway, env.agentId, ended.sessionId)
        const outcome = { disabled: "hung_up", phone: "transferred", webhook: "markup_applied" }[type]
        expect(session).toMatchObject({
          status: "failed",
          endReason: trigger,
          callId: call.callId,
          fallback: {
            trigger,
            type,
            outcome,
            webhookStatus: type === "webhook" ? 200 : null,
            detail: null
          }
        })
        const { fallback } = session
        expect(fallback.errorMessage).toMatch(expectedMessage(trigger, kind, env))
        expect(fallback.carrierRequestAt).not.toBeNull()
        expect(Date.parse(fallback.startedAt)).toBeLessThanOrEqual(Date.parse(fallback.carrierRequestAt))
        expect(Date.parse(fallback.carrierRequestAt)).toBeLessThanOrEqual(Date.parse(fallback.finishedAt))

        // The carrier REST request that decided the call, exactly.
        if (type === "webhook") {
          const request = expectWebhookRequest(path, env, call, session)
          expect(signatureOf(request, env.secret!)).toBe(true)
          if (kind === "telnyx-call-control") await expectTranslatedCommands(call)
          else {
            expect(carrierRequestsFor(gateway, call.callId)).toHaveLength(1)
            expectCarrierRequest(gateway, call, carrierRequestsFor(gateway, call.callId)[0]!, { twiml: WEBHOOK_TWIML })
          }
        } else {
          // The transfer's carrier request, then (Call Control) the hang-up of the caller's leg after the answered transfer.
          const count = type === "phone" && kind === "telnyx-call-control" ? 2 : 1
          await until(() => carrierRequestsFor(gateway, call.callId).length >= count, "the carrier requests")
          const requests = carrierRequestsFor(gateway, call.callId)
          expect(requests).toHaveLength(count)
          expectCarrierRequest(
            gateway,
            call,
            requests[0]!,
            type === "disabled"
              ? { hangup: true }
              : { dial: FALLBACK_NUMBER, callerId: AGENT_NUMBER, tracked: { agentId: env.agentId, sessionId: ended.sessionId } }
          )
        }

        // The carrier stream is closed once the fallback acted; the agent (if any) heard stop.
        await call.carrier.peer.waitClosed()
        if (call.agent !== undefined) await call.agent.waitClosed()
        expect(endedEventsFor(gateway, call.callId)).toHaveLength(1)
      } finally {
        cleanup()
        call.agent?.close()
      }
    })
  })

  describe("fallback webhook signing, live", () => {
    const droppedCall = async (env: TestEnvironment) => {
      const call = await placeCall(gateway, env, kind)
      call.agent!.close()
      await waitForEnded(gateway, call.callId)
      return call
    }

    it("a cleared secret: the request goes unsigned, without either signature header", async () => {
      const path = webhookPath()
      const env = await createEnvironment(gateway, fallbackSettings("webhook", path))
      expect(env.secret).toMatch(/^whsec_/)
      const cleared = await api(gateway, "PATCH", `/v1/agents/${env.agentId}/environments/${env.environmentId}`, {
        errorFallbackWebhookSecret: null
      })
      expect(cleared.errorFallbackWebhookSecret).toBeNull()
      const call = await droppedCall(env)
      const [request] = webhookRequests(path)
      expect(request).toBeDefined()
      expect(request!.headers["x-service-signature"]).toBeUndefined()
      expect(request!.headers["x-service-timestamp"]).toBeUndefined()
      expect(JSON.parse(request!.body.toString())).toMatchObject({ CallSid: call.callId, EnvironmentId: env.environmentId })
    })

    it("after a regenerate: signed with the new secret, and the old one fails verification", async () => {
      const path = webhookPath()
      const env = await createEnvironment(gateway, fallbackSettings("webhook", path))
      const { errorFallbackWebhookSecret: fresh } = await api(
        gateway,
        "POST",
        `/v1/agents/${env.agentId}/environments/${env.environmentId}/regenerate-error-fallback-webhook-secret`
      )
      expect(fresh).not.toBe(env.secret)
      await droppedCall(env)
      const [request] = webhookRequests(path)
      expect(request).toBeDefined()
      expect(signatureOf(request!, fresh)).toBe(true)
      expect(signatureOf(request!, env.secret!)).toBe(false)
    })
  })
})

describe.each(["telnyx-texml", "telnyx-call-control"] as const)("the agent's transfer on %s calls", (kind) => {
  // Twilio's exact transfer request is asserted in test/telephony/streams/twilioStream.test.ts.
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: fallbackGatewayEnv(CA_FILE) })
  })
  afterAll(() => gateway.close())

  it("moves the call with the same transfer request the phone fallback sends: completed, agent_transfer", async () => {
    // The environment's own fallback (another number) must not run: the transfer is no failure.
    const env = await createEnvironment(gateway, { errorFallbackType: "phone", errorFallbackValue: "+14155550777" })
    const call = await placeCall(gateway, env, kind)
    call.agent!.send({ event: "transfer", transfer: { to: FALLBACK_NUMBER } })
    await completeTransfer(gateway, call, env.agentId)
    const ended = await waitForEnded(gateway, call.callId)
    expect(ended).toMatchObject({ status: "completed", endReason: "agent_transfer" })
    // Call Control: the transfer, then the hang-up of what is left of the caller's leg once it ended.
    const count = kind === "telnyx-call-control" ? 2 : 1
    await until(() => carrierRequestsFor(gateway, call.callId).length >= count, "the carrier requests")
    const requests = carrierRequestsFor(gateway, call.callId)
    expect(requests).toHaveLength(count)
    expectCarrierRequest(gateway, call, requests[0]!, {
      dial: FALLBACK_NUMBER,
      callerId: AGENT_NUMBER,
      tracked: { agentId: env.agentId, sessionId: ended.sessionId }
    })
    const session = await getSession(gateway, env.agentId, ended.sessionId)
    expect(session).toMatchObject({ status: "completed", endReason: "agent_transfer", fallback: null })
    await call.carrier.peer.waitClosed()
  })
})
