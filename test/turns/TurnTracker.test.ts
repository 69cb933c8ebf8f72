import { describe, expect, it } from "vitest"
import { type AnsweredTurn, type EndedTurn, TurnTracker, type TurnTrackerOptions } from "../../src/turns/TurnTracker.js"
import type { VoiceClassifier } from "../../src/turns/VoiceActivity.js"

/**
 * Scripted frames: byte 0 says what the "VAD" answers, so the rules can be tested frame by frame.
 * LOUD is speech, HANG is the VAD's hangover (voiced, but at background level), QUIET is silence.
 */
const LOUD = 1
const HANG = 2
const QUIET = 0
/** Loud audio the VAD has not called voiced yet (a soft onset). */
const SOFT = 3
const frameOf = (kind: number) => {
  const frame = new Uint8Array(160)
  frame[0] = kind
  return frame
}
const frames = { loud: frameOf(LOUD), hang: frameOf(HANG), quiet: frameOf(QUIET), soft: frameOf(SOFT) }

class ScriptedVoice implements VoiceClassifier {
  lastPower = 0
  closed = 0
  /** Frames the "VAD" classified, and frames of which only the level was read. */
  classified = 0
  measured = 0
  isVoiced(frame: Uint8Array) {
    this.classified++
    this.lastPower = frame[0] === LOUD || frame[0] === SOFT ? 1_000_000 : 20
    return frame[0] === LOUD || frame[0] === HANG
  }
  measure(frame: Uint8Array) {
    this.measured++
    this.lastPower = frame[0] === LOUD || frame[0] === SOFT ? 1_000_000 : 20
  }
  close() {
    this.closed++
  }
}

const FRAME_MS = 20

/** A tracker on a 20 ms frame clock, recording everything it reports. */
const setup = (overrides: Partial<TurnTrackerOptions> = {}) => {
  const caller = new ScriptedVoice()
  const agent = new ScriptedVoice()
  const ended: Array<EndedTurn> = []
  const answered: Array<AnsweredTurn> = []
  const resumed: Array<{ index: number; atMs: number }> = []
  const tracker = new TurnTracker({
    caller,
    agent,
    minSpeechMs: 160,
    agentMinSpeechMs: 100,
    turnEndSilenceMs: 700,
    onTurnEnded: (turn) => ended.push(turn),
    onAgentResponded: (turn) => answered.push(turn),
    onCallerResumed: (turn, atMs) => resumed.push({ index: turn.index, atMs }),
    ...overrides
  })
  let now = 1000
  /** Plays `count` frames in each direction (caller, agent), 20 ms apart; returns the first frame's time. */
  const play = (count: number, callerFrame: Uint8Array, agentFrame: Uint8Array = frames.quiet) => {
    const start = now
    for (let i = 0; i < count; i++) {
      tracker.callerAudio(callerFrame, now)
      tracker.agentAudio(agentFrame, now)
      now += FRAME_MS
    }
    return start
  }
  return { tracker, caller, agent, ended, answered, resumed, play, now: () => now, advance: (ms: number) => (now += ms) }
}

describe("TurnTracker", () => {
  it("across an agent failover: turns go on being numbered, the waiting turn is timed from the new agent, and the gap is nobody's latency", () => {
    const t = setup()
    t.play(10, frames.quiet)
    t.play(25, frames.loud)
    t.play(40, frames.quiet)
    expect(t.ended.map((turn) => turn.index)).toEqual([1])
    const lostAt = t.now()
    t.tracker.agentAway(lostAt)
    expect(t.tracker.agentIsAway).toBe(true)
    // The caller speaks again during the hold: a second turn, numbered on.
    t.play(25, frames.loud)
    t.play(40, frames.quiet)
    expect(t.ended.map((turn) => turn.index)).toEqual([1, 2])
    t.advance(2000)
    const backAt = t.now()
    const waiting = t.tracker.agentBack(backAt)
    expect(t.tracker.agentIsAway).toBe(false)
    expect(waiting).toMatchObject({ index: 2, endedAtMs: backAt, detectedAtMs: backAt })
    // The new agent answers 300 ms after its start: that, not the hold, is its latency.
    t.advance(300)
    t.play(10, frames.quiet, frames.loud)
    expect(t.answered).toHaveLength(1)
    expect(t.answered[0]).toMatchObject({ index: 2, latencyMs: 300 })
  })

  it("ends a caller turn after the end-of-turn silence, at the last voiced frame", () => {
    const t = setup()
    t.play(10, frames.quiet)
    const speechStart = t.play(25, frames.loud)
    const lastVoiced = speechStart + 24 * FRAME_MS
    t.play(34, frames.quiet) // 680 ms of silence: not yet
    expect(t.ended).toEqual([])
    t.play(2, frames.quiet)
    expect(t.ended).toEqual([{ index: 1, input: "speech", endedAtMs: lastVoiced, detectedAtMs: lastVoiced + 700 }])
    expect(t.tracker.pendingTurn?.index).toBe(1)
    expect(t.tracker.responseDeadlineMs(5000)).toBe(lastVoiced + 5000)
  })

  it("ignores voiced bursts shorter than the minimum speech duration", () => {
    const t = setup()
    for (let i = 0; i < 20; i++) {
      t.play(7, frames.loud) // 140 ms < 160 ms
      t.play(5, frames.quiet)
    }
    t.play(60, frames.quiet)
    expect(t.ended).toEqual([])
  })

  it("counts voiced audio of exactly the minimum speech duration as speech", () => {
    const t = setup()
    t.play(8, frames.loud) // 160 ms
    t.play(40, frames.quiet)
    expect(t.ended).toHaveLength(1)
  })

  it("trims the VAD's hangover: the turn ends at the last loud voiced frame", () => {
    const t = setup()
    t.play(20, frames.quiet)
    const start = t.play(30, frames.loud)
    t.play(5, frames.hang) // voiced to the VAD, background to the ear
    t.play(40, frames.quiet)
    expect(t.ended[0]!.endedAtMs).toBe(start + 29 * FRAME_MS)
  })

  it("trims the hangover by audio, not by arrival time: frames arriving late change nothing", () => {
    const t = setup()
    t.play(20, frames.quiet)
    const start = t.play(30, frames.loud)
    for (let i = 0; i < 5; i++) {
      t.advance(150) // the network held these frames back
      t.play(1, frames.hang)
    }
    t.play(40, frames.quiet)
    expect(t.ended[0]!.endedAtMs).toBe(start + 29 * FRAME_MS)
  })

  it("never trims more than the VAD's longest hangover (100 ms)", () => {
    const t = setup()
    t.play(20, frames.quiet)
    t.play(10, frames.loud)
    const hang = t.play(20, frames.hang) // too long to be hangover: quiet speech
    t.play(40, frames.quiet)
    expect(t.ended[0]!.endedAtMs).toBe(hang + 19 * FRAME_MS - 100)
  })

  it("keeps short VAD dropouts inside speech within the turn", () => {
    const t = setup()
    t.play(10, frames.loud)
    t.play(2, frames.quiet)
    const second = t.play(3, frames.loud) // shorter than the minimum, but continues the speech
    t.play(40, frames.quiet)
    expect(t.ended).toHaveLength(1)
    expect(t.ended[0]!.endedAtMs).toBe(second + 2 * FRAME_MS)
  })

  it("the agent begins responding at its first voiced frame after the turn", () => {
    const t = setup()
    const speech = t.play(20, frames.loud)
    const end = speech + 19 * FRAME_MS
    t.play(60, frames.quiet) // 1.2 s of agent silence
    const answer = t.play(10, frames.quiet, frames.loud)
    expect(t.answered).toEqual([
      { index: 1, input: "speech", endedAtMs: end, detectedAtMs: end + 700, respondedAtMs: answer, latencyMs: answer - end, answerAudioMs: 100 }
    ])
    expect(t.tracker.pendingTurn).toBeUndefined()
  })

  it("dates the answer at a soft onset the VAD called voiced a few frames late", () => {
    const t = setup()
    t.play(20, frames.loud)
    t.play(60, frames.quiet)
    const onset = t.play(3, frames.quiet, frames.soft)
    t.play(10, frames.quiet, frames.loud)
    expect(t.answered[0]!.respondedAtMs).toBe(onset)
  })

  it("a loud lead-in longer than 100 ms is not part of the answer's onset", () => {
    const t = setup()
    t.play(20, frames.loud)
    t.play(60, frames.quiet)
    t.play(6, frames.quiet, frames.soft)
    const voiced = t.play(10, frames.quiet, frames.loud)
    expect(t.answered[0]!.respondedAtMs).toBe(voiced)
  })

  it("agent silence, comfort noise and short voiced blips are not a response", () => {
    const t = setup()
    t.play(20, frames.loud)
    t.play(40, frames.quiet, frames.quiet) // digital silence
    for (let i = 0; i < 10; i++) {
      t.play(4, frames.quiet, frames.loud) // 80 ms: a noise onset, not speech
      t.play(10, frames.quiet)
    }
    expect(t.answered).toEqual([])
    expect(t.tracker.pendingTurn?.index).toBe(1)
  })

  it("reports agent audio that is starting but not yet confirmed", () => {
    const t = setup()
    t.play(20, frames.loud)
    t.play(40, frames.quiet)
    t.play(2, frames.quiet, frames.loud)
    expect(t.tracker.agentStarting).toBe(true)
    t.play(3, frames.quiet, frames.loud)
    expect(t.tracker.agentStarting).toBe(false)
    expect(t.answered).toHaveLength(1)
  })

  it("an agent that starts during the end-of-turn silence ends the caller's turn there", () => {
    const t = setup()
    const speech = t.play(20, frames.loud)
    const end = speech + 19 * FRAME_MS
    t.play(15, frames.quiet) // 300 ms: before the end-of-turn silence
    const answer = t.play(5, frames.quiet, frames.loud)
    expect(t.ended).toHaveLength(1)
    expect(t.ended[0]!.endedAtMs).toBe(end)
    expect(t.answered[0]!.respondedAtMs).toBe(answer)
    expect(t.answered[0]!.latencyMs).toBe(answer - end)
  })

  it("agent speech over caller speech is not an answer until the caller stops", () => {
    const t = setup()
    t.play(20, frames.quiet, frames.loud) // the agent greets
    t.play(30, frames.loud, frames.loud) // the caller talks over it
    expect(t.answered).toEqual([])
    t.play(30, frames.quiet, frames.quiet)
    t.play(10, frames.quiet, frames.quiet)
    expect(t.ended).toHaveLength(1)
    expect(t.answered).toEqual([])
  })

  it("a DTMF digit is caller input: with the caller silent it ends a turn at once", () => {
    const t = setup()
    t.play(10, frames.quiet)
    t.tracker.callerDtmf("5", t.now())
    expect(t.ended).toEqual([{ index: 1, input: "dtmf", endedAtMs: t.now(), detectedAtMs: t.now() }])
    const answer = t.play(5, frames.quiet, frames.loud)
    expect(t.answered[0]!.latencyMs).toBe(answer - t.ended[0]!.endedAtMs)
  })

  it("an agent still talking when a digit ends the turn answers it, dated at the digit", () => {
    const t = setup()
    t.play(10, frames.quiet, frames.loud)
    const digitAt = t.now()
    t.tracker.callerDtmf("5", digitAt)
    // Nobody awaited an answer before the digit, so the agent's VAD was not running: its voice is
    // confirmed over the next agentMinSpeechMs, and the answer is dated where that voice began.
    expect(t.answered).toEqual([])
    t.play(5, frames.quiet, frames.loud)
    expect(t.answered).toEqual([{ index: 1, input: "dtmf", endedAtMs: digitAt, detectedAtMs: digitAt, respondedAtMs: digitAt, latencyMs: 0, answerAudioMs: 100 }])
  })

  it("an agent whose audio stopped on a voiced frame is not still talking: a later turn waits for its next answer", () => {
    const t = setup()
    /** Caller frames only: the agent sends nothing (agents send audio when they speak, not silence). */
    const callerOnly = (count: number, frame: Uint8Array) => {
      const start = t.now()
      for (let i = 0; i < count; i++) {
        t.tracker.callerAudio(frame, t.now())
        t.advance(FRAME_MS)
      }
      return start
    }
    t.play(20, frames.quiet, frames.loud) // a reply cut off mid-word: its last frame is voiced
    callerOnly(25, frames.quiet)
    t.tracker.callerDtmf("1", t.now())
    expect(t.answered).toEqual([])
    const speech = callerOnly(20, frames.loud)
    callerOnly(40, frames.quiet)
    expect(t.ended.map((turn) => turn.index)).toEqual([1, 2])
    expect(t.answered).toEqual([])
    expect(t.tracker.pendingTurn?.endedAtMs).toBe(speech + 19 * FRAME_MS)
    // The agent's next reply answers the turn, dated at its own first frame.
    const answer = t.play(5, frames.quiet, frames.loud)
    expect(t.answered).toEqual([
      expect.objectContaining({ index: 2, respondedAtMs: answer, latencyMs: answer - (speech + 19 * FRAME_MS) })
    ])
  })

  it("a second digit before the answer restarts the response timer from the new digit", () => {
    const t = setup()
    t.tracker.callerDtmf("1", t.now())
    t.play(25, frames.quiet)
    t.tracker.callerDtmf("2", t.now())
    expect(t.resumed).toEqual([{ index: 1, atMs: t.now() }])
    expect(t.ended.map((turn) => turn.index)).toEqual([1, 2])
    expect(t.tracker.pendingTurn?.endedAtMs).toBe(t.now())
  })

  it("a digit pressed while talking belongs to the turn in progress", () => {
    const t = setup()
    t.play(20, frames.loud)
    t.play(5, frames.quiet)
    const digitAt = t.now()
    t.tracker.callerDtmf("9", digitAt)
    t.play(40, frames.quiet)
    expect(t.ended).toEqual([{ index: 1, input: "dtmf", endedAtMs: digitAt, detectedAtMs: digitAt + 700 }])
  })

  it("caller speech before the agent answers supersedes the pending turn", () => {
    const t = setup()
    t.play(20, frames.loud)
    t.play(40, frames.quiet)
    expect(t.ended).toHaveLength(1)
    t.play(7, frames.loud)
    expect(t.resumed).toEqual([])
    t.play(1, frames.loud) // 160 ms: speech again
    expect(t.resumed).toEqual([{ index: 1, atMs: t.now() - FRAME_MS }])
    expect(t.tracker.pendingTurn).toBeUndefined()
    expect(t.tracker.callerSpeaking).toBe(true)
    t.play(40, frames.quiet)
    expect(t.ended.map((turn) => turn.index)).toEqual([1, 2])
  })

  it("a callback that throws is reported and does not break tracking", () => {
    const errors: Array<unknown> = []
    const t = setup({
      onTurnEnded: () => {
        throw new Error("listener bug")
      },
      onCallbackError: (error) => errors.push(error)
    })
    t.play(20, frames.loud)
    t.play(40, frames.quiet)
    t.play(10, frames.quiet, frames.loud)
    expect(errors).toHaveLength(1)
    expect(t.answered).toHaveLength(1)
  })

  it("close frees both detectors once and ignores later frames", () => {
    const t = setup()
    t.play(20, frames.loud)
    t.tracker.close()
    t.tracker.close()
    expect(t.caller.closed).toBe(1)
    expect(t.agent.closed).toBe(1)
    t.play(60, frames.quiet)
    t.tracker.callerDtmf("1", t.now())
    expect(t.ended).toEqual([])
  })

  it("runs the agent's VAD only while an answer may be due: the caller speaking or a turn pending", () => {
    const t = setup()
    t.play(50, frames.quiet, frames.loud) // the agent greets; nobody waits for it
    expect(t.agent.classified).toBe(0)
    expect(t.agent.measured).toBe(50)
    t.play(20, frames.loud) // the caller speaks: the agent could take the floor or talk over the turn
    expect(t.agent.classified).toBe(20)
    t.play(40, frames.quiet) // the end-of-turn silence, then the turn waits for its answer
    expect(t.ended).toHaveLength(1)
    expect(t.agent.classified).toBe(60)
    t.play(5, frames.quiet, frames.loud) // the answer
    expect(t.answered).toHaveLength(1)
    const classified = t.agent.classified
    t.play(100, frames.quiet, frames.loud) // the agent talks on: nothing to time
    expect(t.agent.classified).toBe(classified)
  })
})
