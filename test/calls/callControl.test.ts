import { Effect } from "effect"
import twilio from "twilio"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ApiKeys } from "../../src/apikeys/ApiKeys.js"
import { accountSidOf } from "../../src/kernel/TwilioIds.js"
import { type Gateway, startGateway, until } from "../livecall/callHarness.js"
import { CA_FILE, type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import {
  AGENT_NUMBER,
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
  type TestEnvironment,
  waitForEnded
} from "../fallback/liveCalls.js"

/**
 * The Twilio-compatible call-control API end to end (docs/calls.md, "Controlling a call from the
 * agent"): the agent is a dial-in WebSocket that gets `start`, and its REST client is the official
 * `twilio` SDK with its API base URL set to callgate, authenticating with start.accountSid and the
 * agent's own API key. Carrier REST goes to the loopback Twilio and Telnyx servers. Every
 * environment has a phone fallback, so "no fallback ran" is visible: no <Dial> to it.
 */

const TRANSFER_TO = "+14155550188"
const SAY_THEN_HANG_UP = `<?xml version="1.0" encoding="UTF-8"?><Response><Say>Goodbye.</Say><Hangup/></Response>`

let receiver: Receiver
beforeAll(async () => {
  receiver = await startReceiver(() => ({ status: 200, headers: { "content-type": "text/xml" }, body: SAY_THEN_HANG_UP }))
})
afterAll(() => receiver.close())

/** The official SDK, as a bot would configure it: account from `start`, its API key as the auth token, base URL callgate. */
const twilioClientFor = (gateway: Gateway, accountSid: string, apiKey: string) => {
  const client = twilio(accountSid, apiKey)
  client.api.baseUrl = gateway.httpBase
  return client
}

const restError = async (promise: Promise<unknown>) => {
  try {
    await promise
  } catch (error) {
    const { status, code, message, moreInfo } = error as { status: number; code: number; message: string; moreInfo: string }
    return { status, code, message, moreInfo }
  }
  throw new Error("the request succeeded")
}

describe.each(CALL_KINDS)("Twilio-compatible call control: %s calls", (kind) => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: fallbackGatewayEnv(CA_FILE) })
  })
  afterAll(() => gateway.close())

  const keyFor = (agentIds: Array<string>) =>
    gateway.run(Effect.flatMap(ApiKeys, (keys) => keys.create({ name: "bot", agentIds }))).then((created) => created.key)

  /** A call mid-conversation, and the agent's SDK client built from its `start`. */
  const liveCall = async () => {
    const env = await createEnvironment(gateway, { errorFallbackType: "phone", errorFallbackValue: FALLBACK_NUMBER })
    const call = await placeCall(gateway, env, kind)
    call.carrier.media(CALLER_SPEECH[0]!)
    await call.agent!.waitForEvent("media")
    const { accountSid, callSid } = call.agent!.events("start")[0]!.start
    const key = await keyFor([env.agentId])
    return { env, call, accountSid: accountSid as string, callSid: callSid as string, key, client: twilioClientFor(gateway, accountSid, key) }
  }

  const expectNoFallback = async (env: TestEnvironment, call: LiveCall, endReason: string) => {
    const ended = await waitForEnded(gateway, call.callId)
    expect(ended).toMatchObject({ status: "completed", endReason, direction: "inbound" })
    expect(await getSession(gateway, env.agentId, ended.sessionId)).toMatchObject({ status: "completed", endReason, fallback: null })
    await call.agent!.waitClosed()
    expect(endedEventsFor(gateway, call.callId)).toHaveLength(1)
  }

  it("start carries a Twilio-shaped accountSid of the agent and the session id as callSid; GET reads the call", async () => {
    const { env, call, accountSid, callSid, client } = await liveCall()
    expect(accountSid).toBe(accountSidOf(env.agentId))
    expect(accountSid).toMatch(/^AC[0-9a-f]{32}$/)
    expect(callSid).toBe(call.agent!.events("start")[0]!.start.customParameters.sessionId)
    const fetched = await client.calls(callSid).fetch()
    expect(fetched).toMatchObject({
      sid: callSid,
      accountSid,
      status: "in-progress",
      direction: "inbound",
      from: CALLER,
      to: AGENT_NUMBER,
      apiVersion: "2010-04-01",
      uri: `/2010-04-01/Accounts/${accountSid}/Calls/${callSid}.json`
    })
    expect(fetched.startTime).toBeInstanceOf(Date)
    call.agent!.close()
    // The phone fallback transfers the caller; its session.ended waits for the transfer's outcome.
    await completeTransfer(gateway, call, call.agent!.events("start")[0]!.start.customParameters.agentId)
    await waitForEnded(gateway, call.callId)
  })

  it("calls(callSid).update({status: 'completed'}) hangs up: completed, agent_hangup, no fallback; then a 1000 close changes nothing", async () => {
    const { env, call, callSid, client } = await liveCall()
    const updated = await client.calls(callSid).update({ status: "completed" })
    expect(updated).toMatchObject({ sid: callSid, status: "completed" })
    const requests = carrierRequestsFor(gateway, call.callId)
    expect(requests).toHaveLength(1)
    expectCarrierRequest(gateway, call, requests[0]!, { hangup: true })
    // What Twilio-stream bots do next: close the socket normally.
    call.agent!.ws.close(1000)
    await expectNoFallback(env, call, "agent_hangup")
    expect(carrierRequestsFor(gateway, call.callId)).toHaveLength(1)
    // Over: a second update is refused as Twilio refuses it.
    const again = await restError(client.calls(callSid).update({ status: "completed" }))
    expect(again).toMatchObject({ status: 400, code: 21220 })
    const read = await client.calls(callSid).fetch()
    expect(read).toMatchObject({ status: "completed" })
    expect(Number(read.duration)).toBeGreaterThanOrEqual(0)
  })

  it("update({twiml: <Dial>}) transfers: the carrier request, completed, agent_transfer, no fallback", async () => {
    const { env, call, callSid, client } = await liveCall()
    const twiml = `<Response><Dial>${TRANSFER_TO}</Dial></Response>`
    await client.calls(callSid).update({ twiml })
    const requests = carrierRequestsFor(gateway, call.callId)
    expect(requests).toHaveLength(1)
    const request = requests[0]!
    if (kind === "twilio") expect(request.form).toEqual({ Twiml: twiml })
    else if (kind === "telnyx-texml") expect(request.form).toEqual({ Texml: twiml })
    else {
      expect(decodeURIComponent(request.path)).toBe(`/v2/calls/${call.callId}/actions/transfer`)
      expect(request.json).toEqual({ to: TRANSFER_TO, command_id: expect.any(String) })
    }
    await expectNoFallback(env, call, "agent_transfer")
  })

  it("update({url}) fetches the document through the SSRF-safe client with Twilio's parameters, then applies it", async () => {
    const { env, call, accountSid, callSid, client } = await liveCall()
    const path = `/twiml/${Math.random().toString(36).slice(2)}`
    const before = receiver.requests.length
    if (kind === "telnyx-call-control") {
      // Speech then hangup: Call Control gets the translated speak; the document goes on once Telnyx reports it spoken.
      await client.calls(callSid).update({ url: receiver.url(path) })
      await until(() => carrierRequestsFor(gateway, call.callId).length >= 1, "the speak command")
      expect(decodeURIComponent(carrierRequestsFor(gateway, call.callId)[0]!.path)).toBe(`/v2/calls/${call.callId}/actions/speak`)
    } else {
      await client.calls(callSid).update({ url: receiver.url(path) })
      const [request] = carrierRequestsFor(gateway, call.callId)
      expect(request!.form).toEqual(kind === "twilio" ? { Twiml: SAY_THEN_HANG_UP } : { Texml: SAY_THEN_HANG_UP })
    }
    const fetched = receiver.requests.slice(before).filter((r) => r.path === path)
    expect(fetched).toHaveLength(1)
    expect(fetched[0]!.method).toBe("POST")
    expect(Object.fromEntries(new URLSearchParams(fetched[0]!.body.toString()))).toEqual({
      CallSid: callSid,
      AccountSid: accountSid,
      From: CALLER,
      To: AGENT_NUMBER,
      CallStatus: "in-progress",
      Direction: "inbound",
      ApiVersion: "2010-04-01"
    })
    await expectNoFallback(env, call, "agent_twiml")
  })

  it("a Url the SSRF rules refuse (plain http) is an HTTP retrieval failure; the call goes on", async () => {
    const { call, callSid, client } = await liveCall()
    const refused = await restError(client.calls(callSid).update({ url: "http://127.0.0.1:9/twiml" }))
    expect(refused).toMatchObject({ status: 400, code: 11200 })
    expect(carrierRequestsFor(gateway, call.callId)).toHaveLength(0)
    expect((await client.calls(callSid).fetch()).status).toBe("in-progress")
    call.agent!.close()
    // The phone fallback transfers the caller; its session.ended waits for the transfer's outcome.
    await completeTransfer(gateway, call, call.agent!.events("start")[0]!.start.customParameters.agentId)
    await waitForEnded(gateway, call.callId)
  })

  it("TwiML that is not a <Response> document, or that this carrier cannot run, is refused with 12100; the call goes on", async () => {
    const { call, callSid, client } = await liveCall()
    expect(await restError(client.calls(callSid).update({ twiml: "<Dial>+14155550188" }))).toMatchObject({ status: 400, code: 12100 })
    expect(await restError(client.calls(callSid).update({ twiml: "<Hangup/>" }))).toMatchObject({ status: 400, code: 12100 })
    if (kind === "telnyx-call-control") {
      const gather = await restError(client.calls(callSid).update({ twiml: "<Response><Gather/></Response>" }))
      expect(gather).toMatchObject({ status: 400, code: 12100, message: expect.stringContaining("<Gather>") })
    }
    expect(carrierRequestsFor(gateway, call.callId)).toHaveLength(0)
    expect((await client.calls(callSid).fetch()).status).toBe("in-progress")
    call.agent!.close()
    // The phone fallback transfers the caller; its session.ended waits for the transfer's outcome.
    await completeTransfer(gateway, call, call.agent!.events("start")[0]!.start.customParameters.agentId)
    await waitForEnded(gateway, call.callId)
  })

  it("wrong password: 401 (20003); another agent's call or key: 404 (20404); an unknown call: 404; nothing reaches the carrier", async () => {
    const { env, call, accountSid, callSid, client } = await liveCall()
    const wrongPassword = await restError(twilioClientFor(gateway, accountSid, "not-a-key").calls(callSid).fetch())
    expect(wrongPassword).toEqual({ status: 401, code: 20003, message: "Authenticate", moreInfo: "https://www.twilio.com/docs/errors/20003" })
    expect(await restError(twilioClientFor(gateway, accountSid, "not-a-key").calls(callSid).update({ status: "completed" }))).toMatchObject({
      status: 401,
      code: 20003
    })

    // Another agent, with its own valid key and account, cannot see or end this call.
    const otherAgent = `${env.agentId}-other`
    const otherKey = await keyFor([otherAgent])
    const other = twilioClientFor(gateway, accountSidOf(otherAgent), otherKey)
    const notFound = await restError(other.calls(callSid).update({ status: "completed" }))
    expect(notFound).toMatchObject({ status: 404, code: 20404, message: expect.stringContaining(`/Calls/${callSid}.json`) })
    // Nor by naming this agent's account with its own key.
    expect(await restError(twilioClientFor(gateway, accountSid, otherKey).calls(callSid).fetch())).toMatchObject({ status: 404, code: 20404 })

    expect(await restError(client.calls("ses_doesnotexist").fetch())).toMatchObject({ status: 404, code: 20404 })
    expect(await restError(client.calls("ses_doesnotexist").update({ status: "completed" }))).toMatchObject({ status: 404, code: 20404 })

    expect(carrierRequestsFor(gateway, call.callId)).toHaveLength(0)
    expect((await client.calls(callSid).fetch()).status).toBe("in-progress")
    call.agent!.close()
    // The phone fallback transfers the caller; its session.ended waits for the transfer's outcome.
    await completeTransfer(gateway, call, call.agent!.events("start")[0]!.start.customParameters.agentId)
    await waitForEnded(gateway, call.callId)
  })
})
