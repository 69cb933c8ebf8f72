import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { Session } from "../../src/sessions/SessionSchema.js"
import { type Gateway, sessionIdOf, startGateway, storedSession, until } from "../livecall/callHarness.js"
import { CA_FILE, type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import {
  AGENT_NUMBER,
  CALL_KINDS,
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
  sleep,
  speakThenListen,
  type TestEnvironment,
  trackedTransferOf,
  waitForEnded
} from "./liveCalls.js"

/**
 * Triggers that race in one session: whatever arrives together, the session ends
 * once, the rescue runs at most once, and the carrier gets one request. The fallback is a webhook
 * answering with a <Dial>, so a second rescue would show as a second webhook request and a second
 * carrier request.
 */

const DIAL_TWIML = `<?xml version="1.0" encoding="UTF-8"?><Response><Dial callerId="${AGENT_NUMBER}">${FALLBACK_NUMBER}</Dial></Response>`
const AGENT_TRANSFER_TO = "+14155550888"
/** Time for a late duplicate (a second rescue, a second REST request) to show up. */
const SETTLE_MS = 150

let receiver: Receiver
beforeAll(async () => {
  receiver = await startReceiver(() => ({ status: 200, headers: { "content-type": "text/xml" }, body: DIAL_TWIML }))
})
afterAll(() => receiver.close())

const webhookEnvironment = (extra: Record<string, unknown> = {}) => {
  const path = `/race/${Math.random().toString(36).slice(2)}`
  return { path, settings: { errorFallbackType: "webhook", errorFallbackValue: receiver.url(path), ...extra } }
}
const webhookRequests = (path: string) => receiver.requests.filter((r) => r.path.startsWith(`${path}?`))

describe.each(CALL_KINDS)("racing triggers on %s calls", (kind) => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: fallbackGatewayEnv(CA_FILE) })
  })
  afterAll(() => gateway.close())

  const newCall = async (extra: Record<string, unknown> = {}) => {
    const { path, settings } = webhookEnvironment(extra)
    const env = await createEnvironment(gateway, settings)
    const call = await placeCall(gateway, env, kind)
    return { path, env, call }
  }

  /**
   * However the race went: one session.ended, and the one carrier request (and, for a failure,
   * the one webhook request) that the winning ending calls for. Returns the winner.
   */
  const expectOneAction = async (race: { path: string; env: TestEnvironment; call: LiveCall }) => {
    const { path, env, call } = race
    // An agent's transfer that won sends session.ended once its outcome came: the carrier reports it answered.
    await until(() => endedEventsFor(gateway, call.callId).length > 0 || trackedTransferOf(gateway, call) !== undefined, "the ending")
    if (trackedTransferOf(gateway, call) !== undefined) await completeTransfer(gateway, call, env.agentId)
    const ended = await waitForEnded(gateway, call.callId)
    await sleep(SETTLE_MS)
    expect(endedEventsFor(gateway, call.callId)).toHaveLength(1)
    const session = await getSession(gateway, env.agentId, ended.sessionId)
    expect(session).toMatchObject({ status: ended.status, endReason: ended.endReason })
    const requests = carrierRequestsFor(gateway, call.callId)
    const webhooks = webhookRequests(path)
    switch (session.endReason) {
      case "caller_hangup":
        // The caller was gone first: nothing to do at the carrier, no fallback.
        expect(session).toMatchObject({ status: "completed", fallback: null })
        expect(requests).toHaveLength(0)
        expect(webhooks).toHaveLength(0)
        break
      case "agent_hangup":
        expect(session).toMatchObject({ status: "completed", fallback: null })
        expect(requests).toHaveLength(1)
        expectCarrierRequest(gateway, call, requests[0]!, { hangup: true })
        expect(webhooks).toHaveLength(0)
        break
      case "agent_transfer":
        expect(session).toMatchObject({ status: "completed", fallback: null, transfers: [{ initiatedBy: "agent", status: "answered" }] })
        // Call Control: the transfer, then the hang-up of what is left of the caller's leg after it.
        await until(() => carrierRequestsFor(gateway, call.callId).length >= (kind === "telnyx-call-control" ? 2 : 1), "the carrier requests")
        expect(carrierRequestsFor(gateway, call.callId)).toHaveLength(kind === "telnyx-call-control" ? 2 : 1)
        expectCarrierRequest(gateway, call, requests[0]!, {
          dial: AGENT_TRANSFER_TO,
          callerId: AGENT_NUMBER,
          tracked: { agentId: env.agentId, sessionId: session.id }
        })
        expect(webhooks).toHaveLength(0)
        break
      default:
        // A hard error won: the fallback ran once, for that trigger.
        expect(session).toMatchObject({
          status: "failed",
          fallback: { trigger: session.endReason, type: "webhook", outcome: "markup_applied", webhookStatus: 200 }
        })
        expect(webhooks).toHaveLength(1)
        expect(JSON.parse(webhooks[0]!.body.toString())).toMatchObject({
          SessionId: session.id,
          ErrorMessage: session.fallback.errorMessage
        })
        expect(requests).toHaveLength(1)
        expectCarrierRequest(
          gateway,
          call,
          requests[0]!,
          kind === "telnyx-call-control" ? { dial: FALLBACK_NUMBER, callerId: AGENT_NUMBER } : { twiml: DIAL_TWIML }
        )
    }
    return session.endReason as string
  }

  it("the agent's hangup or transfer racing its socket drop: one carrier request", async () => {
    // The drop lands at different points of the ending: at once, while the carrier is being
    // asked, after the agent heard stop.
    const plans = [0, 1, 3, 10].flatMap((dropAfterMs) => [
      { dropAfterMs, message: { event: "hangup" } },
      { dropAfterMs, message: { event: "transfer", transfer: { to: AGENT_TRANSFER_TO } } }
    ])
    const winners = await Promise.all(
      plans.map(async (plan) => {
        const race = await newCall()
        const agent = race.call.agent!
        agent.send(plan.message)
        if (plan.dropAfterMs === 0) agent.close()
        else setTimeout(() => agent.close(), plan.dropAfterMs)
        return expectOneAction(race)
      })
    )
    // Frames on one socket are handled in order, so the agent's own ending comes first whenever
    // its frame got out before the drop (a reset may in principle discard it: then the drop wins).
    plans.forEach((plan, i) =>
      expect([plan.message.event === "hangup" ? "agent_hangup" : "agent_transfer", "agent_disconnected"]).toContain(winners[i])
    )
  })

  it("the agent's error and socket drop racing the caller hanging up: one ending, at most one carrier request", async () => {
    const orders = ["agent first", "caller first", "agent first", "caller first", "agent first", "caller first"]
    const winners = await Promise.all(
      orders.map(async (order, i) => {
        const race = await newCall()
        const agent = race.call.agent!
        const agentFails = () => {
          agent.send({ event: "error", error: { message: "the model crashed" } })
          agent.close()
        }
        // The caller hangs up: the stream's stop, or on two of the Call Control calls (one of each
        // order) Telnyx's call.hangup webhook.
        const callerHangsUp = () => {
          if (kind === "telnyx-call-control" && (i === 2 || i === 3)) void gateway.hangUpCall(race.call.callId)
          else race.call.carrier.stop()
        }
        if (order === "agent first") {
          agentFails()
          callerHangsUp()
        } else {
          callerHangsUp()
          agentFails()
        }
        return expectOneAction(race)
      })
    )
    for (const winner of winners) expect(["caller_hangup", "agent_error", "agent_disconnected"]).toContain(winner)
  })

  it("the agent's error and socket drop at the moment the breaker trips: one fallback, one carrier request", async () => {
    // Around the trip: the response deadline is 1 s after the caller's turn ended. (Both win in
    // practice: the earliest offsets mostly go to the agent, the rest to the breaker.)
    const offsetsMs = [-30, -15, -10, -6, -3, 0, 3, 10]
    const winners = await Promise.all(
      offsetsMs.map(async (offsetMs) => {
        const race = await newCall({ errorFallbackTimeout: 1, errorFallbackOccurrenceThreshold: 1 })
        const agent = race.call.agent!
        const sessionId = sessionIdOf(agent)
        const stopSpeaking = speakThenListen(race.call)
        try {
          const callerEndedAt = await turnEnded(race.env, sessionId)
          // Turn times are stamped on the monotonic clock, the watchdog's deadline on the wall
          // clock; the two drift apart over a process's life (callgate runs in this process).
          const drift = Date.now() - (performance.timeOrigin + performance.now())
          await sleep(Date.parse(callerEndedAt) + drift + 1000 + offsetMs - Date.now())
          agent.send({ event: "error", error: { message: "the model crashed" } })
          agent.close()
          return await expectOneAction(race)
        } finally {
          stopSpeaking()
        }
      })
    )
    for (const winner of winners) expect(["agent_unresponsive", "agent_error", "agent_disconnected"]).toContain(winner)
  })

  /** When the caller's turn ended, as the session's stored turns say (the breaker counts from there). */
  const turnEnded = async (env: TestEnvironment, sessionId: string): Promise<string> => {
    const deadline = Date.now() + 5000
    for (;;) {
      const session: Session = await storedSession(gateway, env.agentId, sessionId)
      const endedAt = session.turns[0]?.callerEndedAt
      if (endedAt !== undefined) return endedAt
      if (Date.now() > deadline) throw new Error("the caller's turn never ended")
      await sleep(5)
    }
  }
})
