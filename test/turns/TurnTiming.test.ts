import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, TestClock } from "effect"
import type { BreakerSettings } from "../../src/breaker/Breaker.js"
import type { NoResponseTrip } from "../../src/breaker/ResponseWatchdog.js"
import { Metrics } from "../../src/observability/Metrics.js"
import { TurnTiming } from "../../src/turns/TurnTiming.js"
import { VoiceActivity } from "../../src/turns/VoiceActivity.js"
import { Breaker } from "../../src/breaker/Breaker.js"
import { type WatchCallOptions } from "../../src/turns/TurnTiming.js"
import { breakerLayer, newEnvironment, settle, watching } from "../breaker/breakerTestLayer.js"

/**
 * One call's turn timing end to end: real VAD on real audio, the watchdog on the TestClock (frames
 * carry their own times; the watchdog counts from a turn's end on the Effect Clock). `advance` moves
 * the clock, then waits until the watchdogs have run up to their next wait, so what did not happen
 * by then will not happen.
 */

const audio = (name: string) => new Uint8Array(readFileSync(fileURLToPath(new URL(`../fixtures/audio/${name}.ulaw`, import.meta.url))))
const FRAME = 160
const quiet = new Uint8Array(FRAME).fill(0xff)

const advance = (ms: number) => Effect.zipRight(TestClock.adjust(ms), settle)

/** The call's watch, with the trip subscription a live call holds (livecall/LiveCall.ts): rescues go to `onRescue`. */
const watchCall = (options: WatchCallOptions, onRescue: (trip: NoResponseTrip) => void) =>
  Effect.gen(function* () {
    const timing = yield* TurnTiming
    const breaker = yield* Breaker
    const call = yield* timing.watchCall(options)
    yield* breaker.subscribeTrips(options.agentId, options.environmentId, (trip) => {
      const rescue = call.rescuedBy(trip)
      if (rescue !== undefined) onRescue(rescue)
    })
    yield* watching(call)
    return call
  })

const layer = () => breakerLayer()

/**
 * Plays the caller clip followed by `silenceMs` of silence (agent silent throughout, unless an
 * agent clip starts `agentAfterMs` after the caller clip ends), stamping frames so that the last
 * one is "now": the relay would have taken that long in real time.
 */
const play = (observer: { callerAudio: (f: Uint8Array, at: number) => void; agentAudio: (f: Uint8Array, at: number) => void }, options: {
  caller: Uint8Array
  silenceMs: number
  agent?: { clip: Uint8Array; afterMs: number }
}) => {
  const callerFrames = options.caller.length / FRAME
  const total = Math.ceil(callerFrames + options.silenceMs / 20)
  const base = performance.now() - total * 20
  for (let i = 0; i < total; i++) {
    const at = base + i * 20
    observer.callerAudio(i < Math.floor(callerFrames) ? options.caller.subarray(i * FRAME, i * FRAME + FRAME) : quiet, at)
    const agentStart = options.agent ? Math.floor(callerFrames + options.agent.afterMs / 20) : Infinity
    const j = i - agentStart
    const agentFrame = options.agent && j >= 0 && (j + 1) * FRAME <= options.agent.clip.length ? options.agent.clip.subarray(j * FRAME, j * FRAME + FRAME) : quiet
    observer.agentAudio(agentFrame, at)
  }
}

describe("TurnTiming", () => {
  it.scoped("a silent agent after a caller turn trips the breaker and rescues the call", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<NoResponseTrip> = []
      const settings: BreakerSettings = { timeoutSeconds: 1, threshold: 1, windowSeconds: 60 }
      const call = yield* watchCall({
        ...env,
        sessionId: "call-1",
        settings: Effect.succeed(settings)
      }, (trip) => void rescues.push(trip))
      play(call.observer, { caller: audio("caller-appointment"), silenceMs: 800 })
      expect(call.turns()).toHaveLength(1)
      yield* advance(1200)
      expect(rescues).toEqual([{ reason: "threshold", count: 1, threshold: 1, trippedBy: "call-1", timeoutSeconds: 1 }])
    }).pipe(Effect.provide(layer())))

  it.scoped("an agent's voiced answer is recorded on the call's turns and in the latency histogram", () =>
    Effect.gen(function* () {
      const { registry } = yield* Metrics
      const env = newEnvironment()
      const rescues: Array<NoResponseTrip> = []
      const call = yield* watchCall({
        ...env,
        sessionId: "call-2",
        settings: Effect.succeed({ timeoutSeconds: 5, threshold: 1, windowSeconds: 60 })
      }, (trip) => void rescues.push(trip))
      const before = Date.now()
      play(call.observer, { caller: audio("caller-account"), silenceMs: 4000, agent: { clip: audio("agent-greeting"), afterMs: 1500 } })
      const turns = call.turns()
      expect(turns).toHaveLength(1)
      const turn = turns[0]!
      expect(turn.input).toBe("speech")
      expect(turn.latencyMs).toBeGreaterThan(1000)
      expect(turn.latencyMs).toBeLessThan(2000)
      expect(Date.parse(turn.agentRespondedAt!) - Date.parse(turn.callerEndedAt)).toBeCloseTo(turn.latencyMs!, -1)
      expect(Date.parse(turn.callerEndedAt)).toBeGreaterThan(before - 15_000)
      expect(Date.parse(turn.callerEndedAt)).toBeLessThan(Date.now())
      expect(turn.timeoutOccurrences).toBe(0)
      const text = yield* Effect.promise(() => registry.metrics())
      expect(text).toContain(
        `callgate_agent_response_latency_seconds_count{agent="${env.agentId}",environment="${env.environmentId}"} 1`
      )
      // Past the 5 s timeout: the answer stopped the timer.
      yield* advance(6000)
      expect(rescues).toEqual([])
    }).pipe(Effect.provide(layer())))

  it.scoped("a turn is written when it ends, and its answer once with its playout: when the carrier echoes callgate's mark, or when the answer is cut", () =>
    Effect.gen(function* () {
      let writes = 0
      const call = yield* watchCall({
        ...newEnvironment(),
        sessionId: "call-writes",
        settings: Effect.succeed({ timeoutSeconds: 5, threshold: 1, windowSeconds: 60 }),
        onTurnsChanged: () => void writes++
      }, () => {})
      // Turn 1: answered, its mark echoed.
      play(call.observer, { caller: audio("caller-account"), silenceMs: 4000, agent: { clip: audio("agent-greeting"), afterMs: 1500 } })
      expect(call.turns()[0]).toMatchObject({ index: 1, latencyMs: expect.any(Number), playedLatencyMs: null })
      expect(writes).toBe(1)
      const mark = call.observer.takeMark()
      expect(mark).toBe("callgate:played:1")
      call.observer.playoutMarkEchoed(mark!, performance.now())
      expect(writes).toBe(2)
      expect(call.turns()[0]!.playedLatencyMs).toEqual(expect.any(Number))
      // Turn 2: answered, then cut by the agent's clear before the echo.
      play(call.observer, { caller: audio("caller-appointment"), silenceMs: 4000, agent: { clip: audio("agent-greeting"), afterMs: 1500 } })
      expect(call.turns()[1]).toMatchObject({ index: 2, latencyMs: expect.any(Number) })
      expect(writes).toBe(3)
      expect(call.observer.takeMark()).toBe("callgate:played:2")
      call.observer.agentClear(performance.now())
      expect(writes).toBe(4)
      expect(call.turns()[1]!.playedLatencyMs).toBeNull()
    }).pipe(Effect.provide(layer())))

  it.scoped("DTMF is caller input: a digit followed by agent silence counts", () =>
    Effect.gen(function* () {
      const rescues: Array<NoResponseTrip> = []
      const call = yield* watchCall({
        ...newEnvironment(),
        sessionId: "call-3",
        settings: Effect.succeed({ timeoutSeconds: 1, threshold: 1, windowSeconds: 60 })
      }, (trip) => void rescues.push(trip))
      call.observer.callerDtmf("4", performance.now())
      expect(call.turns().map((turn) => turn.input)).toEqual(["dtmf"])
      yield* advance(1200)
      expect(rescues).toHaveLength(1)
    }).pipe(Effect.provide(layer())))

  it.scoped("closing the call's scope stops timing and frees the detectors", () =>
    Effect.gen(function* () {
      const rescues: Array<NoResponseTrip> = []
      const call = yield* Effect.scoped(
        Effect.tap(
          watchCall({
            ...newEnvironment(),
            sessionId: "call-4",
            settings: Effect.succeed({ timeoutSeconds: 1, threshold: 1, windowSeconds: 60 })
          }, (trip) => void rescues.push(trip)),
          (call) => Effect.sync(() => call.observer.callerDtmf("1", performance.now()))
        )
      )
      yield* advance(1200)
      expect(rescues).toEqual([])
      // Frames after the end are ignored, not a crash.
      call.observer.callerAudio(audio("caller-appointment").subarray(8000, 8160), performance.now())
      call.observer.close()
      expect(call.turns()).toHaveLength(1)
    }).pipe(Effect.provide(layer())))

  it.scoped("observer.close() stops the call's timing at once, before its scope closes", () =>
    Effect.gen(function* () {
      const rescues: Array<NoResponseTrip> = []
      const options = (sessionId: string) => ({
        ...newEnvironment(),
        sessionId,
        settings: Effect.succeed({ timeoutSeconds: 1, threshold: 1, windowSeconds: 60 })
      })
      const rescued = (sessionId: string) => (trip: NoResponseTrip) => void rescues.push({ ...trip, trippedBy: sessionId })
      const closed = yield* watchCall(options("closed"), rescued("closed"))
      const open = yield* watchCall(options("open"), rescued("open"))
      closed.observer.callerDtmf("1", performance.now())
      open.observer.callerDtmf("1", performance.now())
      closed.observer.close()
      closed.observer.close()
      yield* advance(1200)
      expect(rescues.map((r) => r.trippedBy)).toEqual(["open"])
      open.observer.close()
    }).pipe(Effect.provide(layer())))
})
