import { readFileSync } from "node:fs"
import type { FvadModule } from "@echogarden/fvad-wasm"
import { fileURLToPath } from "node:url"
import { Effect, Layer } from "effect"
import { beforeAll, describe, expect, it } from "vitest"
import { defaults } from "../../config/defaults.js"
import { AppConfig } from "../../src/config/AppConfig.js"
import { type AnsweredTurn, type EndedTurn, TurnTracker } from "../../src/turns/TurnTracker.js"
import { writeStamp } from "../../sim/FrameStamp.js"
import { MULAW_TO_PCM } from "../../src/audio/Mulaw.js"
import { loadFvad, QUIET_POWER, QUIET_SETTLE_FRAMES, VoiceActivity, VoiceDetector } from "../../src/turns/VoiceActivity.js"
import { testConfigLayer } from "../support/testApp.js"

const audio = (name: string) => new Uint8Array(readFileSync(fileURLToPath(new URL(`../fixtures/audio/${name}.ulaw`, import.meta.url))))
const FRAME = 160
const FRAME_MS = 20
const silence = (ms: number) => new Uint8Array((ms / FRAME_MS) * FRAME).fill(0xff)
const concat = (...parts: Array<Uint8Array>) => {
  const out = new Uint8Array(parts.reduce((n, part) => n + part.length, 0))
  let offset = 0
  for (const part of parts) {
    out.set(part, offset)
    offset += part.length
  }
  return out
}

let fvad: FvadModule
beforeAll(async () => {
  fvad = await Effect.runPromise(loadFvad)
})

const detector = () => new VoiceDetector(fvad, defaults.VAD_MODE)

/** Runs caller (and optionally agent) audio through a tracker with real detectors at the defaults. */
const track = (callerAudio: Uint8Array, agentAudio?: Uint8Array) => {
  const ended: Array<EndedTurn> = []
  const answered: Array<AnsweredTurn> = []
  const tracker = new TurnTracker({
    caller: detector(),
    agent: detector(),
    minSpeechMs: defaults.VAD_MIN_SPEECH_MS,
    agentMinSpeechMs: defaults.VAD_AGENT_MIN_SPEECH_MS,
    turnEndSilenceMs: defaults.TURN_END_SILENCE_MS,
    onTurnEnded: (turn) => ended.push(turn),
    onAgentResponded: (turn) => answered.push(turn)
  })
  const quiet = new Uint8Array(FRAME).fill(0xff)
  const frames = Math.max(callerAudio.length, agentAudio?.length ?? 0) / FRAME
  for (let i = 0; i < frames; i++) {
    const at = i * FRAME_MS
    tracker.callerAudio(i * FRAME + FRAME <= callerAudio.length ? callerAudio.subarray(i * FRAME, i * FRAME + FRAME) : quiet, at)
    const agentFrame = agentAudio && i * FRAME + FRAME <= agentAudio.length ? agentAudio.subarray(i * FRAME, i * FRAME + FRAME) : quiet
    tracker.agentAudio(agentFrame, at)
  }
  tracker.close()
  return { ended, answered }
}

/** Where speech really is in a clean clip, by level alone (frames above -60 dBFS; its silence is below -75): the reference. */
const speechSpan = (clip: Uint8Array) => {
  const loud: Array<number> = []
  for (let i = 0; i + FRAME <= clip.length; i += FRAME) {
    let power = 0
    for (let j = 0; j < FRAME; j++) power += MULAW_TO_PCM[clip[i + j]!]! ** 2
    if (power / FRAME > 1000) loud.push(i / FRAME)
  }
  return { first: loud[0]! * FRAME_MS, last: loud[loud.length - 1]! * FRAME_MS }
}

describe("VoiceActivity", () => {
  it("decodes G.711 mu-law", () => {
    expect(MULAW_TO_PCM[0xff]).toBe(0)
    expect(MULAW_TO_PCM[0x7f]).toBe(0)
    expect(MULAW_TO_PCM[0x00]).toBe(-32124)
    expect(MULAW_TO_PCM[0x80]).toBe(32124)
    expect(MULAW_TO_PCM[0xf0]).toBe(120)
  })

  it.each(["caller-appointment", "caller-account", "agent-greeting"])("%s is one voiced caller turn", (name) => {
    const { ended } = track(concat(silence(1000), audio(name), silence(2000)))
    expect(ended).toHaveLength(1)
  })

  it("noisy speech is still detected", () => {
    const { ended } = track(concat(audio("line-noise"), audio("caller-appointment-noisy"), audio("line-noise")))
    expect(ended.length).toBeGreaterThanOrEqual(1)
  })

  it("line noise is not speech", () => {
    expect(track(concat(audio("line-noise"), audio("line-noise"), audio("line-noise"))).ended).toEqual([])
    expect(track(concat(silence(1000), audio("line-noise"), silence(1000))).ended).toEqual([])
  })

  it("digital silence is never voiced", () => {
    const vad = detector()
    const frame = new Uint8Array(FRAME).fill(0xff)
    for (let i = 0; i < 250; i++) expect(vad.isVoiced(frame)).toBe(false)
    expect(vad.lastPower).toBe(0)
    vad.close()
    expect(track(silence(5000)).ended).toEqual([])
  })

  it("agent line noise and silence after a caller turn are not a response", () => {
    const caller = concat(silence(500), audio("caller-appointment"))
    const agent = concat(silence(caller.length / 8 + 1500), audio("line-noise"), silence(500), audio("line-noise"))
    const { answered, ended } = track(concat(caller, silence(8000)), agent)
    expect(ended).toHaveLength(1)
    expect(answered).toEqual([])
  })

  it.each([
    ["caller-appointment", "caller-appointment", "silence"],
    ["caller-account", "caller-account", "silence"],
    ["caller-appointment-noisy", "caller-appointment", "line noise"]
  ])("measures the latency after %s within one frame (reference %s, background %s)", (clip, reference, background) => {
    const noise = audio("line-noise")
    const quiet = (ms: number) =>
      background === "silence" ? silence(ms) : concat(...Array.from({ length: Math.ceil(ms / 3000) }, () => noise)).subarray(0, (ms / FRAME_MS) * FRAME)
    const caller = concat(quiet(1000), audio(clip))
    const callerEnd = 1000 + speechSpan(audio(reference)).last
    const greeting = audio("agent-greeting")
    for (const gapMs of [200, 900, 2500]) {
      // The agent starts speaking gapMs after the caller's last loud frame.
      const lead = callerEnd + gapMs - speechSpan(greeting).first
      const agent = concat(silence(lead), greeting)
      const { answered } = track(concat(caller, quiet(10_000)), agent)
      expect(answered).toHaveLength(1)
      expect(Math.abs(answered[0]!.latencyMs - gapMs)).toBeLessThanOrEqual(FRAME_MS)
    }
  })

  it("measures every turn of a conversation within one frame, whatever state the detectors are in", () => {
    const sentences = ["caller-appointment", "caller-account", "caller-appointment", "caller-account"]
    const gaps = [350, 1200, 2800, 600]
    const greeting = audio("agent-greeting")
    const greetingStart = speechSpan(greeting).first
    const callerParts: Array<Uint8Array> = [silence(1000)]
    const agentParts: Array<Uint8Array> = []
    let position = 1000
    let agentPosition = 0
    sentences.forEach((name, i) => {
      const clip = audio(name)
      const end = position + speechSpan(clip).last
      const agentStart = end + gaps[i]! - greetingStart
      agentParts.push(silence(agentStart - agentPosition), greeting)
      agentPosition = agentStart + greeting.length / 8
      const after = agentPosition + 800 - (position + clip.length / 8)
      callerParts.push(clip, silence(Math.ceil(after / FRAME_MS) * FRAME_MS))
      position += clip.length / 8 + Math.ceil(after / FRAME_MS) * FRAME_MS
    })
    const { answered } = track(concat(...callerParts, silence(2000)), concat(...agentParts))
    expect(answered.map((turn) => turn.index)).toEqual([1, 2, 3, 4])
    answered.forEach((turn, i) => expect(Math.abs(turn.latencyMs - gaps[i]!), `turn ${i + 1}`).toBeLessThanOrEqual(FRAME_MS))
  })

  it("frames of any size are cut into 20 ms pieces", () => {
    const speech = concat(silence(1000), audio("caller-appointment"))
    const whole = detector()
    const pieces = detector()
    let voicedWhole = 0
    let voicedPieces = 0
    for (let i = 0; i + FRAME <= speech.length; i += FRAME) if (whole.isVoiced(speech.subarray(i, i + FRAME))) voicedWhole++
    for (let i = 0; i + 100 <= speech.length; i += 100) if (pieces.isVoiced(speech.subarray(i, i + 100))) voicedPieces++
    expect(voicedWhole).toBeGreaterThan(100)
    // Five of every eight 100-byte frames complete a piece; the others repeat the last verdict.
    expect(voicedPieces / (speech.length / 100)).toBeCloseTo(voicedWhole / (speech.length / FRAME), 1)
    whole.close()
    pieces.close()
  })

  it("close is idempotent and a closed detector hears nothing", () => {
    const vad = detector()
    const speech = audio("caller-appointment")
    vad.close()
    vad.close()
    expect(vad.isVoiced(speech.subarray(8000, 8160))).toBe(false)
  })

  it("rejects an invalid aggressiveness", () => {
    expect(() => new VoiceDetector(fvad, 7)).toThrow(/invalid mode 7/)
  })

  it("the service reads its settings from the configuration", async () => {
    const settings = await Effect.runPromise(
      Effect.map(VoiceActivity, (vad) => vad.settings).pipe(
        Effect.provide(
          VoiceActivity.Default.pipe(
            Layer.provide(AppConfig.Default),
            Layer.provide(testConfigLayer({ VAD_MODE: "2", VAD_MIN_SPEECH_MS: "120", TURN_END_SILENCE_MS: "600" }))
          )
        )
      )
    )
    expect(settings).toEqual({ vadMode: 2, minSpeechMs: 120, agentMinSpeechMs: defaults.VAD_AGENT_MIN_SPEECH_MS, turnEndSilenceMs: 600 })
  })

  it("refuses a VAD_MODE outside 0 to 3 at start", async () => {
    const exit = await Effect.runPromiseExit(
      Effect.provide(AppConfig, AppConfig.Default.pipe(Layer.provide(testConfigLayer({ VAD_MODE: "4" }))))
    )
    expect(exit._tag).toBe("Failure")
    expect(JSON.stringify(exit)).toContain("VAD_MODE")
  })

  it("the energy gate: a quiet line skips the VAD once the VAD's hangover has run out, with the VAD's own verdicts up to there", async () => {
    // A detector whose module counts the VAD passes it runs.
    let passes = 0
    const counting = Object.create(fvad) as FvadModule
    counting._fvad_process = (instance: number, samples: number, length: number) => {
      passes++
      return fvad._fvad_process(instance, samples, length)
    }
    let seed = 1
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31
    // What a carrier sends in a pause: digital silence, the bench's stamped silence, a line a few codes from zero.
    const lines: Record<string, Uint8Array> = {
      "digital silence": silence(3000),
      "stamped silence": (() => {
        const line = Buffer.from(silence(3000))
        for (let i = 0; i < line.length / FRAME; i++) writeStamp(line.subarray(i * FRAME), 7, i, 2 ** 40 + i * 20_000)
        return new Uint8Array(line)
      })(),
      "quiet line": new Uint8Array(3000 * 8).map(() => (random() < 0.5 ? 0xf8 : 0x78) | (7 - Math.floor(random() * 4)))
    }
    for (const [name, line] of Object.entries(lines)) {
      for (const clip of ["caller-appointment", "caller-account", "agent-greeting", "caller-appointment-noisy"]) {
        const played = concat(audio(clip), line)
        const gated = new VoiceDetector(counting, defaults.VAD_MODE)
        const reference = fvad._fvad_new()
        fvad._fvad_set_mode(reference, defaults.VAD_MODE)
        fvad._fvad_set_sample_rate(reference, 8000)
        const samples = fvad._malloc(FRAME * 2)
        let skipped = 0
        for (let at = 0; at + FRAME <= played.length; at += FRAME) {
          const frame = played.subarray(at, at + FRAME)
          const heap = fvad.HEAP16
          for (let i = 0; i < FRAME; i++) heap[(samples >> 1) + i] = MULAW_TO_PCM[frame[i]!]!
          const expected = fvad._fvad_process(reference, samples, FRAME) === 1
          const before = passes
          expect(gated.isVoiced(frame), `${clip} then ${name}, frame ${at / FRAME}`).toBe(expected)
          if (passes === before) {
            skipped++
            expect(gated.lastPower).toBeLessThan(QUIET_POWER)
          }
        }
        // The pause (150 frames) is heard by the VAD for its first QUIET_SETTLE_FRAMES at most.
        expect(skipped, `${clip} then ${name}`).toBeGreaterThanOrEqual(150 - QUIET_SETTLE_FRAMES)
        fvad._fvad_free(reference)
        fvad._free(samples)
        gated.close()
      }
    }
    // Line noise is above the gate: every frame of it goes through the VAD.
    const noisy = new VoiceDetector(counting, defaults.VAD_MODE)
    const noise = audio("line-noise")
    const before = passes
    for (let at = 0; at + FRAME <= noise.length; at += FRAME) noisy.isVoiced(noise.subarray(at, at + FRAME))
    expect(passes - before).toBe(noise.length / FRAME)
    noisy.close()
  })

  it("measure reads the level without the VAD", () => {
    const vad = detector()
    const speech = audio("caller-appointment").subarray(160 * 100, 160 * 101)
    vad.measure(speech)
    expect(vad.lastPower).toBeGreaterThan(1000)
    vad.measure(new Uint8Array(FRAME).fill(0xff))
    expect(vad.lastPower).toBe(0)
    vad.close()
  })
})
