import { describe, expect, it } from "vitest"
import { defaults } from "../../config/defaults.js"
import { addCall, classifyCall, emptyAccount, type PlayedSentence } from "../../bench/turnAccounting.js"
import { TurnTracker } from "../../src/turns/TurnTracker.js"
import { VoiceDetector } from "../../src/turns/VoiceActivity.js"
import { audio, firstLoudMs, lastLoudMs, loadFvadOnce } from "../turns/recordedTurns.js"

const options = { turnEndSilenceMs: 700, toleranceMs: 150, observedUntilMs: 100_000 }
const sentence = (startedAtMs: number, speechEndedAtMs: number, agentStartedAtMs?: number): PlayedSentence => ({
  startedAtMs,
  speechEndedAtMs,
  agentStartedAtMs
})

describe("turn accounting", () => {
  it("classifies each sentence: detected, overlap, merge, unfinished, miss; and the extra turns", () => {
    const sentences = [
      sentence(0, 3000, 4000), // answered after the end-of-turn silence: detected
      sentence(6000, 9000, 9300), // the agent began 300 ms after: overlap
      sentence(12_000, 14_000), // the caller went on 400 ms later: merge
      sentence(14_400, 17_000, 18_000), // detected (the merged turn ends here)
      sentence(20_000, 23_000, 24_000), // no turn at all: miss
      sentence(30_000, 99_500) // still being spoken at the end: unfinished
    ]
    const turns = [{ endedAtMs: 3010 }, { endedAtMs: 9000 }, { endedAtMs: 15_500 }, { endedAtMs: 16_990 }, { endedAtMs: 27_000 }]
    const call = classifyCall(sentences, turns, options)
    expect(call.outcomes).toEqual(["detected", "overlap", "merge", "detected", "miss", "unfinished"])
    expect(call.extra).toEqual(["split", "noise"])
    expect(addCall(emptyAccount(), call)).toEqual({
      sentences: 6,
      detected: 2,
      overlap: 1,
      merge: 1,
      unfinished: 1,
      miss: 1,
      extraSplit: 1,
      extraNoise: 1
    })
  })

  it("the recordings, clean and noisy: every sentence is a turn, an overlap or a merge, and line noise is no turn", async () => {
    const fvad = await loadFvadOnce()
    const FRAME = 160
    const quietFrame = new Uint8Array(FRAME).fill(0xff)
    const noise = audio("line-noise")
    const greeting = audio("agent-greeting")
    // [clip, where its speech ends (clean reference), pause before the agent answers (ms), or null: the caller goes on after `pause` ms]
    const plan: Array<{ clip: string; reference: string; answerAfterMs: number | null; pauseMs: number; noisy: boolean }> = [
      { clip: "caller-appointment", reference: "caller-appointment", answerAfterMs: 1200, pauseMs: 0, noisy: false },
      { clip: "caller-account", reference: "caller-account", answerAfterMs: 300, pauseMs: 0, noisy: false },
      { clip: "caller-appointment", reference: "caller-appointment", answerAfterMs: null, pauseMs: 200, noisy: false },
      { clip: "caller-account", reference: "caller-account", answerAfterMs: 900, pauseMs: 0, noisy: false },
      { clip: "caller-appointment-noisy", reference: "caller-appointment", answerAfterMs: 1500, pauseMs: 0, noisy: true },
      { clip: "caller-appointment-noisy", reference: "caller-appointment", answerAfterMs: 250, pauseMs: 0, noisy: true }
    ]
    // Lay the call out frame by frame on both sides, noting the truth as it goes.
    const callerFrames: Array<Uint8Array> = []
    const agentFrames: Array<Uint8Array> = []
    const background = (noisy: boolean, i: number) => (noisy ? noise.subarray((i % (noise.length / FRAME)) * FRAME, (i % (noise.length / FRAME)) * FRAME + FRAME) : quietFrame)
    const fill = (untilFrame: number, noisy: boolean) => {
      while (callerFrames.length < untilFrame) callerFrames.push(background(noisy, callerFrames.length))
      while (agentFrames.length < untilFrame) agentFrames.push(quietFrame)
    }
    const played: Array<PlayedSentence> = []
    fill(50, false)
    for (const step of plan) {
      const clip = audio(step.clip)
      fill(Math.max(callerFrames.length, agentFrames.length), step.noisy)
      const startFrame = callerFrames.length
      for (let at = 0; at + FRAME <= clip.length; at += FRAME) callerFrames.push(clip.subarray(at, at + FRAME))
      const speechEnded = startFrame * 20 + lastLoudMs(audio(step.reference))
      const speechStarted = startFrame * 20 + firstLoudMs(audio(step.reference))
      if (step.answerAfterMs === null) {
        fill(callerFrames.length + step.pauseMs / 20, step.noisy)
        played.push(sentence(speechStarted, speechEnded))
        continue
      }
      const agentStart = speechEnded + step.answerAfterMs
      fill(Math.ceil((agentStart - firstLoudMs(greeting)) / 20), step.noisy)
      for (let at = 0; at + FRAME <= greeting.length; at += FRAME) agentFrames.push(greeting.subarray(at, at + FRAME))
      played.push(sentence(speechStarted, speechEnded, agentStart))
      fill(agentFrames.length + 40, step.noisy)
    }
    // Then line noise alone for 6 s.
    fill(callerFrames.length + 300, true)
    fill(Math.max(callerFrames.length, agentFrames.length), true)

    const turns: Array<{ endedAtMs: number }> = []
    const tracker = new TurnTracker({
      caller: new VoiceDetector(fvad, defaults.VAD_MODE),
      agent: new VoiceDetector(fvad, defaults.VAD_MODE),
      minSpeechMs: defaults.VAD_MIN_SPEECH_MS,
      agentMinSpeechMs: defaults.VAD_AGENT_MIN_SPEECH_MS,
      turnEndSilenceMs: defaults.TURN_END_SILENCE_MS,
      onTurnEnded: (turn) => turns.push({ endedAtMs: turn.endedAtMs })
    })
    for (let i = 0; i < callerFrames.length; i++) {
      tracker.callerAudio(callerFrames[i]!, i * 20)
      tracker.agentAudio(agentFrames[i]!, i * 20)
    }
    tracker.close()

    const call = classifyCall(played, turns, { ...options, turnEndSilenceMs: defaults.TURN_END_SILENCE_MS, observedUntilMs: callerFrames.length * 20 })
    expect(call.outcomes).toEqual(["detected", "overlap", "merge", "detected", "detected", "overlap"])
    expect(call.extra).toEqual([])
  })
})
