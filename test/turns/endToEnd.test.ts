import { Effect } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import { type AnsweringAgent, startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { Breaker } from "../../src/breaker/Breaker.js"
import type { UpdateEnvironmentBody } from "../../src/environments/EnvironmentSchema.js"
import { readUlawFile, silence, speechLike } from "../../sim/AudioSource.js"
import { twilioSid } from "../../sim/CallEntry.js"
import { nowUs } from "../../sim/FrameStamp.js"
import { FRAME_BYTES, FRAME_MS } from "../../sim/Mulaw.js"
import type { SimCall } from "../../sim/SimCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type Gateway, startGateway } from "../livecall/callHarness.js"
import { reportTransferOutcome, trackedDial, type TransferRef } from "../fallback/liveCalls.js"
import { ADMIN_KEY, adminAuth, uniqueId } from "../support/testApp.js"

/**
 * Turn timing and the no-response breaker on real calls: callgate wired as main.ts wires it
 * (TurnTiming on every call, the real error fallback), listening on 127.0.0.1 with the fake Twilio
 * REST server; the caller is the simulator, the agents are the example agents.
 */

const PUBLIC_URL = "https://callgate.test"
const AGENT_NUMBER = "+15550100002"
const FALLBACK_NUMBER = "+14155550123"
const WINDOW_SECONDS = 300

/** A caller's sentence (1.6 s of speech-like audio); the line stays silent after it. */
const sentence = () => speechLike({ durationMs: 1600 })

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * One clock for every party (callgate, the simulator and the agents all run in this process):
 * FrameStamp's nowUs, in ms. callgate stamps turns with performance.now() (as ISO times, whole
 * ms); both clocks count from one monotonic source, so their offset is read once.
 */
const frameClockOffsetMs = (() => {
  let best = Infinity
  for (let i = 0; i < 5; i++) {
    const before = performance.now()
    const us = nowUs()
    best = Math.min(best, us / 1000 - before)
  }
  return best
})()
const onFrameClock = (iso: string) => Date.parse(iso) - performance.timeOrigin + frameClockOffsetMs

/** Polls `read` until `check` holds for its value, or fails after `timeoutMs` (a limit for a busy machine, never an assertion). */
const eventually = async <A>(read: () => Promise<A> | A, check: (value: A) => boolean, what: string, timeoutMs = 30_000): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (check(value)) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(value)})`)
    await sleep(20)
  }
}

describe("turn timing and the no-response breaker on real calls", () => {
  let gateway: Gateway | undefined
  const agents: Array<SilentAgent | AnsweringAgent> = []
  const calls: Array<SimCall> = []

  afterEach(async () => {
    await Promise.all(calls.splice(0).map((call) => call.hangup()))
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    await gateway?.close()
    gateway = undefined
  })

  const setup = async (patch: UpdateEnvironmentBody) => {
    gateway = await startGateway({})
    const agentId = uniqueId("agent")
    const { id: environmentId } = await gateway.createEnvironment(agentId, patch)
    const g = gateway

    const connection = { gatewayUrl: g.httpBase, agentId, environmentId, apiKey: ADMIN_KEY }
    /** A silent agent with one idle socket, so the next call is its. */
    const silentAgent = async () => {
      const agent = await startSilentAgent(connection)
      agents.push(agent)
      await agent.ready()
      return agent
    }
    const answeringAgent = async (responseLatencyMs: number) => {
      const agent = await startAnsweringAgent({ ...connection, responseLatencyMs, reply })
      agents.push(agent)
      await agent.ready()
      return agent
    }
    const closeAgent = async (agent: SilentAgent | AnsweringAgent) => {
      agents.splice(agents.indexOf(agent), 1)
      await agent.close()
    }
    const placeCall = async () => {
      const callSid = twilioSid("CA")
      const call = await placeTwilioCall({
        gatewayUrl: g.httpBase,
        agentId,
        environmentId,
        callSid,
        to: AGENT_NUMBER,
        streamVia: "gateway",
        authToken: g.twilio.authToken,
        publicUrl: PUBLIC_URL
      })
      calls.push(call)
      return { call, callSid }
    }
    /** The session of a call, as GET /v1/agents/:agentId/sessions/:sessionId shows it. */
    const session = async (callSid: string): Promise<any> => {
      const listed = await eventually(
        async () => {
          const res = await fetch(`${g.httpBase}/v1/agents/${agentId}/sessions?environmentId=${environmentId}&limit=100`, { headers: adminAuth })
          return ((await res.json()) as any).data.sessions as Array<any>
        },
        (sessions) => sessions.some((s) => s.callId === callSid),
        `the session of ${callSid}`
      )
      const { id } = listed.find((s) => s.callId === callSid)
      const res = await fetch(`${g.httpBase}/v1/agents/${agentId}/sessions/${id}`, { headers: adminAuth })
      expect(res.status).toBe(200)
      return ((await res.json()) as any).data
    }
    /** Occurrences in the environment's window now. */
    const occurrences = () => g.run(Effect.flatMap(Breaker, (breaker) => breaker.count(agentId, environmentId, WINDOW_SECONDS)))
    /** The breaker's occurrence counter for the environment (every expiry, refreshes included). */
    const occurrencesRecorded = async () => {
      const text = await (await fetch(`${g.httpBase}/metrics`)).text()
      const line = text.split("\n").find((l) => l.startsWith("callgate_breaker_occurrences_total{") && l.includes(`environment="${environmentId}"`))
      return line === undefined ? 0 : Number(line.split(" ").at(-1))
    }
    return { gateway: g, agentId, environmentId, silentAgent, answeringAgent, closeAgent, placeCall, session, occurrences, occurrencesRecorded }
  }

  // The agent's reply starts on a voiced frame, so "began answering" is one unambiguous frame, and
  // ends on one, like a reply cut off mid-word: the agent then sends nothing, which must not pass
  // for an agent still talking when the caller's next turn ends (it did, with latency 0).
  const greeting = readUlawFile("examples/agents/audio/agent-greeting.ulaw")
  const reply = greeting.subarray(5 * FRAME_BYTES, 45 * FRAME_BYTES)

  describe("threshold 2, timeout 1 s: the second stalled call trips the breaker", () => {
    const cases = [
      { type: "disabled", value: null, outcome: "hung_up", request: (_ref: TransferRef) => ({ Status: "completed" }) },
      {
        type: "phone",
        value: FALLBACK_NUMBER,
        outcome: "transferred",
        // The transfer is tracked (docs/fallback.md, "Transfer outcomes").
        request: (ref: TransferRef) => ({ Twiml: trackedDial("twilio", FALLBACK_NUMBER, AGENT_NUMBER, ref) })
      }
    ] as const

    it.each(cases)("fallback $type: both stalled calls are rescued with $outcome", async ({ type, value, outcome, request }) => {
      const t = await setup({
        errorFallbackType: type,
        errorFallbackValue: value,
        errorFallbackTimeout: 1,
        errorFallbackOccurrenceThreshold: 2,
        errorFallbackTimeWindow: WINDOW_SECONDS
      })
      await t.silentAgent()
      const first = await t.placeCall()
      await first.call.play(sentence())

      // The first deadline passes: one occurrence, below the threshold; the call keeps waiting.
      await eventually(t.occurrences, (n) => n === 1, "the first occurrence")
      // Each later expiry refreshes that session's occurrence: recorded again, still counted once.
      await eventually(t.occurrencesRecorded, (n) => n >= 2, "the first call's re-armed timer to expire again")
      expect(await t.occurrences()).toBe(1)
      expect(t.gateway.twilio.requests).toEqual([])
      expect(first.call.isOpen).toBe(true)
      expect(await t.session(first.callSid)).toMatchObject({ status: "active", endReason: null, fallback: null })

      // A second stalled call: its first occurrence is the environment's second, the threshold.
      await t.silentAgent()
      const second = await t.placeCall()
      await second.call.play(sentence())
      // The first call's expiries counted when the trip is first seen (an upper bound of those before the trip).
      let firstExpiriesAtTrip: number | undefined
      await eventually(
        async () => {
          if (firstExpiriesAtTrip === undefined && t.gateway.twilio.callUpdates(second.callSid).length > 0) {
            // Every occurrence so far: the second call's one, and the first call's.
            firstExpiriesAtTrip = (await t.occurrencesRecorded()) - 1
          }
          return firstExpiriesAtTrip !== undefined && t.gateway.twilio.callUpdates(first.callSid).length > 0
        },
        (both) => both,
        "the fallback's carrier requests for both calls",
        6000
      )
      // Exactly one carrier request per call: the fallback's.
      for (const { callSid } of [first, second]) {
        const { id } = await t.session(callSid)
        expect(t.gateway.twilio.callUpdates(callSid).map((r) => r.form)).toEqual([request({ agentId: t.agentId, sessionId: id })])
        // A transfer's session.ended waits for its outcome: the number answers.
        if (type === "phone") await reportTransferOutcome(t.gateway, { kind: "twilio", callId: callSid }, { agentId: t.agentId, sessionId: id }, "answered")
      }
      for (const { call } of [first, second]) {
        expect(await call.closed).toMatchObject({ by: "gateway", code: 1000 })
      }

      const message = "The agent did not begin responding within 1 s of the caller's input: 2 no-response occurrences in the environment's time window reached the threshold of 2."
      const stored = new Map<string, any>()
      for (const { callSid } of [first, second]) {
        const session = await eventually(() => t.session(callSid), (s) => s.status !== "active", `the end of ${callSid}`)
        stored.set(callSid, session)
        expect(session).toMatchObject({
          status: "failed",
          endReason: "agent_unresponsive",
          fallback: { trigger: "agent_unresponsive", type, outcome, errorMessage: message }
        })
        expect(session.fallback.carrierRequestAt).not.toBeNull()
        // One caller turn, never answered, during which the response timer expired.
        expect(session.turns).toHaveLength(1)
        expect(session.turns[0]).toMatchObject({ index: 1, input: "speech", agentRespondedAt: null, latencyMs: null })
        expect(session.turns[0].timeoutOccurrences).toBeGreaterThanOrEqual(1)
        const event = await t.gateway.outbox.forSession(session.id)
        expect(event).toMatchObject({ event: "session.ended", sessionId: session.id, status: "failed", endReason: "agent_unresponsive", callId: callSid })
      }
      const [firstSession, secondSession] = [stored.get(first.callSid), stored.get(second.callSid)]
      const at = (iso: string) => Date.parse(iso)
      // The trip came at the second call's first deadline (its timer expired exactly once, after its caller's last word).
      expect(secondSession.turns[0].timeoutOccurrences).toBe(1)
      expect(at(secondSession.fallback.carrierRequestAt)).toBeGreaterThan(at(secondSession.turns[0].callerEndedAt))
      // It rescued the first call, stalled past its own deadline, by the same trip: after the second
      // caller's turn, and no later than the first call's next expiry.
      expect(at(firstSession.fallback.carrierRequestAt)).toBeGreaterThan(at(secondSession.turns[0].callerEndedAt))
      expect(firstSession.turns[0].timeoutOccurrences).toBeLessThanOrEqual(firstExpiriesAtTrip! + 1)
    })
  })

  it("a voiced answer in between clears the occurrences: the next stalled call counts 1 and does not trip", async () => {
    const t = await setup({ errorFallbackTimeout: 1, errorFallbackOccurrenceThreshold: 2, errorFallbackTimeWindow: WINDOW_SECONDS })

    // A stalled call: one occurrence. Its caller gives up and hangs up; the occurrence stays.
    const silent = await t.silentAgent()
    const stalled = await t.placeCall()
    await stalled.call.play(sentence())
    await eventually(t.occurrences, (n) => n === 1, "the stalled call's occurrence")
    expect(await stalled.call.hangup()).toMatchObject({ by: "simulator" })
    expect(await eventually(() => t.session(stalled.callSid), (s) => s.status !== "active", "the stalled call's end")).toMatchObject({
      status: "completed",
      endReason: "caller_hangup"
    })
    expect(await t.occurrences()).toBe(1)
    await t.closeAgent(silent)

    // A call whose agent answers: the environment's occurrences are cleared.
    const answering = await t.answeringAgent(200)
    const answered = await t.placeCall()
    const turn = await answered.call.turn(sentence(), { answerTimeoutMs: 60_000 })
    expect(turn.answer.answered).toBe(true)
    await eventually(t.occurrences, (n) => n === 0, "the occurrences to be cleared")
    await answered.call.hangup()
    await t.closeAgent(answering)

    // One more stalled call: one occurrence, below the threshold of 2, so no trip.
    await t.silentAgent()
    const next = await t.placeCall()
    await next.call.play(sentence())
    await eventually(t.occurrences, (n) => n === 1, "the next stalled call's occurrence")
    // Its timer re-arms and expires again: a refresh of the same session, never a second count.
    const recorded = await t.occurrencesRecorded()
    await eventually(t.occurrencesRecorded, (n) => n > recorded, "the re-armed timer to expire again")
    expect(await t.occurrences()).toBe(1)
    expect(next.call.isOpen).toBe(true)
    expect(await t.session(next.callSid)).toMatchObject({ status: "active", fallback: null })
    // No fallback ran for any of the three calls.
    expect(t.gateway.twilio.requests).toEqual([])
  })

  describe("what counts as a caller turn", () => {
    const RESPONSE_LATENCY_MS = 300

    it("speech-like audio and a recorded caller are turns, timed from the caller's last voiced frame to the agent's first reply frame", async () => {
      const t = await setup({ errorFallbackTimeout: 5, errorFallbackOccurrenceThreshold: 1 })
      const agent = await t.answeringAgent(RESPONSE_LATENCY_MS)
      // When the agent decided each turn had ended, and when its reply's first frame went out.
      const agentTurnEndAt: Array<number> = []
      const agentAudioSentAt: Array<number> = []
      agent.on("turn", ({ turn }) => void (agentTurnEndAt[turn - 1] = nowUs() / 1000))
      agent.on("audioSent", ({ turn, atUs }) => void (agentAudioSentAt[turn - 1] = atUs / 1000))
      const { call, callSid } = await t.placeCall()

      const simulated: Array<{ readonly lastVoicedSentAt: number; readonly answerHeardAt: number }> = []
      const marks: Array<string> = []
      call.on("mark", ({ name }) => void marks.push(name))
      for (const audio of [sentence(), readUlawFile("test/fixtures/audio/caller-appointment.ulaw")]) {
        const bytesBefore = call.stats.agentBytes
        const turn = await call.turn(audio, { answerTimeoutMs: 60_000 })
        // The agent's mark follows the last frame of its reply: once it is here, the whole reply is.
        await eventually(() => marks.length, (n) => n > simulated.length, "the agent's mark after its reply")
        expect(turn.answer.answered).toBe(true)
        if (turn.answer.answered) {
          simulated.push({ lastVoicedSentAt: turn.answer.atUs / 1000 - turn.answer.latencyMs, answerHeardAt: turn.answer.atUs / 1000 })
        }
        expect(call.stats.agentBytes - bytesBefore).toBe(reply.length)
      }

      const { turns } = await eventually(() => t.session(callSid), (s) => s.turns.length === 2 && s.turns.every((x: any) => x.latencyMs !== null), "two answered turns")
      expect(turns.map((turn: any) => [turn.index, turn.input, turn.timeoutOccurrences])).toEqual([
        [1, "speech", 0],
        [2, "speech", 0]
      ])
      for (const [i, turn] of turns.entries()) {
        const callerEndedAt = onFrameClock(turn.callerEndedAt)
        const agentRespondedAt = onFrameClock(turn.agentRespondedAt)
        // The latency is the span between the two stamps it reports...
        expect(Math.abs(turn.latencyMs - (Date.parse(turn.agentRespondedAt) - Date.parse(turn.callerEndedAt)))).toBeLessThanOrEqual(1)
        // ...and each stamp sits at its protocol event. Each bound below is an order of events on one
        // clock (a frame is received after it was sent; callgate stamps a frame before it relays it),
        // so a busy machine, which only delays events, cannot break them; 1 ms is the stamps' rounding.
        // The turn ended at the caller's last voiced frame: not before the simulator sent it, and
        // before the agent, which waits out 700 ms of quiet after it, ended the turn too.
        expect(callerEndedAt).toBeGreaterThanOrEqual(simulated[i]!.lastVoicedSentAt - 1)
        expect(callerEndedAt).toBeLessThanOrEqual(agentTurnEndAt[i]! + 1)
        // The agent answered at its reply's first frame: after the agent sent it, before the caller heard it.
        expect(agentRespondedAt).toBeGreaterThanOrEqual(agentAudioSentAt[i]! - 1)
        expect(agentRespondedAt).toBeLessThanOrEqual(simulated[i]!.answerHeardAt + 1)
        // So the latency is at least the agent's own response delay, which sits between its turn end and
        // its first frame, and at most what the caller heard (the simulator's figure for the same turn).
        expect(agentAudioSentAt[i]! - agentTurnEndAt[i]!).toBeGreaterThanOrEqual(RESPONSE_LATENCY_MS - 1)
        expect(turn.latencyMs).toBeGreaterThanOrEqual(RESPONSE_LATENCY_MS - 3)
        expect(turn.latencyMs).toBeLessThanOrEqual(simulated[i]!.answerHeardAt - simulated[i]!.lastVoicedSentAt + 3)
      }
      expect(await t.occurrences()).toBe(0)
      expect(t.gateway.twilio.requests).toEqual([])
    })

    it("pure silence and line noise are no turn and never record an occurrence, even with timeout 1 s and threshold 1", async () => {
      const t = await setup({ errorFallbackTimeout: 1, errorFallbackOccurrenceThreshold: 1 })
      await t.silentAgent()
      const { call, callSid } = await t.placeCall()
      await call.play(silence(2000))
      await call.play(readUlawFile("test/fixtures/audio/line-noise.ulaw"))
      // Quiet for longer than the end-of-turn silence and the timeout after the noise: a turn in it
      // would have recorded an occurrence by now, and tripped.
      await call.pause(2000)
      // Then a sentence, which the silent agent never answers: its occurrence trips the breaker.
      await call.play(sentence())
      const ended = await eventually(() => t.session(callSid), (s) => s.status !== "active", "the trip by the sentence's occurrence")
      expect(ended).toMatchObject({ status: "failed", endReason: "agent_unresponsive", fallback: { trigger: "agent_unresponsive" } })
      // The sentence is the call's first and only turn, and the trip came after it: the silence and the
      // line noise before it were no turn, so no occurrence came from them.
      expect(ended.turns).toHaveLength(1)
      expect(ended.turns[0]).toMatchObject({ index: 1, input: "speech", agentRespondedAt: null })
      expect(Date.parse(ended.fallback.carrierRequestAt)).toBeGreaterThan(Date.parse(ended.turns[0].callerEndedAt))
    })
  })
})
