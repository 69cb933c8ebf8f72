import { readFileSync } from "node:fs"
import { extname } from "node:path"
import { FRAME_MS, MULAW_SILENCE, SAMPLE_RATE, encodeMulaw, padToFrames } from "./Mulaw.js"
import { AudioFormatError, wavToMulaw } from "./Wav.js"

/**
 * Call audio for the simulator and the example agents. Every source returns 8 kHz mu-law padded
 * with silence to whole 160-byte (20 ms) frames, as one Buffer; `framesOf` views it frame by frame.
 */

const samplesFor = (ms: number) => Math.max(0, Math.round((ms * SAMPLE_RATE) / 1000))
const wholeFrames = (ms: number) => Math.ceil(ms / FRAME_MS) * FRAME_MS

/** Digital silence (0xFF) for `ms`, rounded up to whole frames. */
export const silence = (ms: number): Buffer => Buffer.alloc(samplesFor(wholeFrames(ms)), MULAW_SILENCE)

/** A raw mu-law file (no header), as the fixtures in test/fixtures/audio. */
export const readUlawFile = (path: string): Buffer => padToFrames(readFileSync(path))

/** A WAV file: mu-law 8 kHz, or 16-bit PCM mono at 8 or 16 kHz (see Wav.ts). */
export const readWavFile = (path: string): Buffer => padToFrames(wavToMulaw(readFileSync(path), path).audio)

/** Small deterministic PRNG (mulberry32): the same seed gives the same audio on every run. */
export const seededRandom = (seed: number) => {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/**
 * Low brown noise, like a quiet phone line: never loud enough to be speech. `rms` is on the
 * 16-bit linear scale (150 is about -47 dBFS).
 */
export const comfortNoise = (ms: number, options: { readonly rms?: number; readonly seed?: number } = {}): Buffer => {
  const random = seededRandom(options.seed ?? 7)
  const samples = new Float64Array(samplesFor(wholeFrames(ms)))
  let level = 0
  for (let i = 0; i < samples.length; i++) {
    level = 0.98 * level + (random() * 2 - 1)
    samples[i] = level
  }
  return encodeMulaw(scaleToRms(samples, options.rms ?? 150))
}

const scaleToRms = (samples: Float64Array, rms: number): Float64Array => {
  let sum = 0
  for (const v of samples) sum += v * v
  const current = Math.sqrt(sum / Math.max(1, samples.length))
  const gain = current > 0 ? rms / current : 0
  return samples.map((v) => v * gain)
}

// Formants (F1, F2, F3 in Hz) of a few vowels: each syllable picks one.
const VOWELS: ReadonlyArray<readonly [number, number, number]> = [
  [730, 1090, 2440],
  [270, 2290, 3010],
  [300, 870, 2240],
  [530, 1840, 2480],
  [570, 840, 2410]
]

export interface SpeechLikeOptions {
  /** Length of the utterance before `trailingSilenceMs`; default 1600 ms. */
  readonly durationMs?: number
  /** Silence appended after the utterance; default 0. */
  readonly trailingSilenceMs?: number
  /** Fundamental frequency at the start of each word, Hz; default 140 (it falls through the word). */
  readonly pitchHz?: number
  /** Peak level as a fraction of full scale; default 0.35 (about -9 dBFS). */
  readonly level?: number
  readonly seed?: number
}

/**
 * Speech-like audio that a real voice activity detector (WebRTC VAD) and an energy detector both
 * take for speech: words of one to three syllables, each a harmonic tone with a falling pitch and
 * vowel formants, shaped by a syllable-rate (about 4-5 Hz) amplitude envelope; words are separated
 * by short silences (60-160 ms, far shorter than an end-of-turn pause).
 */
export const speechLike = (options: SpeechLikeOptions = {}): Buffer => {
  const random = seededRandom(options.seed ?? 1)
  const total = samplesFor(options.durationMs ?? 1600)
  const basePitch = options.pitchHz ?? 140
  const out = new Float64Array(total)
  let cursor = 0
  while (cursor < total) {
    const syllables = 1 + Math.floor(random() * 3)
    const wordStart = cursor
    for (let s = 0; s < syllables && cursor < total; s++) {
      const length = Math.min(total - cursor, samplesFor(180 + random() * 80))
      const [f1, f2, f3] = VOWELS[Math.floor(random() * VOWELS.length)]!
      let phase = 0
      for (let i = 0; i < length; i++) {
        const t = (cursor + i - wordStart) / SAMPLE_RATE
        const pitch = basePitch * (1 - 0.15 * t) * (1 + 0.02 * Math.sin(2 * Math.PI * 5 * t))
        phase += (2 * Math.PI * pitch) / SAMPLE_RATE
        let sample = 0
        for (let k = 1; k * pitch < 3600; k++) {
          const f = k * pitch
          const weight = resonance(f, f1, 90) + 0.7 * resonance(f, f2, 110) + 0.4 * resonance(f, f3, 150)
          sample += (weight / Math.sqrt(k)) * Math.sin(k * phase)
        }
        // Syllable envelope: a raised sine over the syllable, so energy rises and falls at ~4-5 Hz.
        const envelope = Math.sin((Math.PI * i) / length) ** 1.5
        out[cursor + i] = envelope * (sample + 0.02 * (random() * 2 - 1))
      }
      cursor += length
    }
    cursor += samplesFor(60 + random() * 100) // the gap between words stays silent (zeros)
  }
  let peak = 0
  for (const v of out) peak = Math.max(peak, Math.abs(v))
  const gain = peak > 0 ? ((options.level ?? 0.35) * 32767) / peak : 0
  const speech = encodeMulaw(out.map((v) => v * gain))
  const trailing = options.trailingSilenceMs ?? 0
  return padToFrames(trailing > 0 ? Buffer.concat([speech, silence(trailing)]) : speech)
}

const resonance = (f: number, center: number, bandwidth: number) => 1 / (1 + ((f - center) / bandwidth) ** 2)

/**
 * Audio named on a command line: `speech` or `speech:<ms>`, `silence` or `silence:<ms>`,
 * `noise` or `noise:<ms>`, or a path to a `.wav` or raw mu-law (`.ulaw`, `.mulaw`, `.ul`, `.raw`) file.
 */
export const loadAudio = (spec: string): Buffer => {
  const [kind, arg] = spec.split(":", 2)
  const ms = arg !== undefined && /^\d+$/.test(arg) ? Number(arg) : undefined
  if (kind === "speech" && (arg === undefined || ms !== undefined)) return speechLike({ durationMs: ms ?? 1600 })
  if (kind === "silence" && (arg === undefined || ms !== undefined)) return silence(ms ?? 2000)
  if (kind === "noise" && (arg === undefined || ms !== undefined)) return comfortNoise(ms ?? 2000)
  const extension = extname(spec).toLowerCase()
  if (extension === ".wav") return readWavFile(spec)
  if ([".ulaw", ".mulaw", ".ul", ".raw", ".pcmu"].includes(extension)) return readUlawFile(spec)
  throw new AudioFormatError(`cannot tell what audio "${spec}" is: use speech, silence, noise, a .wav or a .ulaw file`)
}
