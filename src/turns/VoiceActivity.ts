import createFvad, { type FvadModule } from "@echogarden/fvad-wasm"
import { Effect } from "effect"
import { MULAW_TO_PCM } from "../audio/Mulaw.js"
import { AppConfig } from "../config/AppConfig.js"

/**
 * Voice activity detection on the calls' own audio: G.711 mu-law, 8 kHz, usually 160 bytes per
 * 20 ms frame. The detector is WebRTC's VAD (libfvad compiled to WebAssembly), a Gaussian-mixture
 * speech/noise classifier over six frequency bands: unlike an energy threshold it tells speech from
 * steady line noise, hiss and comfort noise.
 *
 * The WebAssembly module is loaded once per process (asynchronously, while the service is built);
 * each call then owns small synchronous detectors (one per direction, since the VAD adapts to the
 * noise of its stream) that do no allocation per frame.
 */

/**
 * Each mu-law byte's PCM sample squared: a frame's level is a sum of 160 lookups (half the work of
 * decoding and multiplying, measured), so a frame the energy gate decides is never decoded at all.
 */
const MU_LAW_POWER: Float64Array = Float64Array.from(MULAW_TO_PCM, (sample) => sample * sample)

/** Mean square of a frame's PCM samples. */
const meanPowerOf = (frame: Uint8Array): number => {
  const length = frame.length
  let power = 0
  for (let i = 0; i < length; i++) power += MU_LAW_POWER[frame[i]!]!
  return length === 0 ? 0 : power / length
}

const SAMPLE_RATE = 8000
/** libfvad takes 10, 20 or 30 ms frames; odd-sized input is cut into 20 ms pieces. */
const PIECE_SAMPLES = 160
const MAX_DIRECT_SAMPLES = 240

/**
 * The energy gate: a frame under QUIET_POWER (mean square of its samples: about -60 dBFS, the
 * level the turn tracker's own loudness test starts at, so no frame under it ever counts as
 * audible speech there) is silence once the line has been that quiet for QUIET_SETTLE_FRAMES in a
 * row, and the VAD is not run on it. The frames before that still go through the VAD, so its
 * hangover (at most 7 frames of 20 ms in any mode) runs out and its filters settle exactly as
 * without the gate. What carriers send in a pause (digital silence, or a quiet line a few codes
 * from zero) is under it; line noise loud enough to matter (the recordings' is about -42 dBFS)
 * is above it and is classified by the VAD as before. test/turns/VoiceActivity.test.ts compares
 * every verdict with the ungated VAD's on the recordings, digital silence and quiet lines, and
 * test/turns/recordedTurns.test.ts pins turn detection.
 */
export const QUIET_POWER = 1000
export const QUIET_SETTLE_FRAMES = 8

/** What the turn tracker needs from a detector; tests substitute scripted ones. */
export interface VoiceClassifier {
  /** Whether this frame is speech. Synchronous, allocation-free; `frame` is not kept. */
  isVoiced(frame: Uint8Array): boolean
  /**
   * Reads only the frame's level (`lastPower`): the VAD does not hear it and its verdict is not
   * asked for. For frames whose verdict nobody needs (the agent's audio while no answer is due).
   */
  measure(frame: Uint8Array): void
  /** Mean square of the last frame's PCM samples (0 for digital silence), for trimming the VAD's hangover. */
  readonly lastPower: number
  /** Frees the detector. Idempotent; afterwards every frame is unvoiced. */
  close(): void
}

let loading: Promise<FvadModule> | undefined

/** The WebAssembly module, loaded on first use and shared by every detector of the process. */
export const loadFvad: Effect.Effect<FvadModule> = Effect.tryPromise({
  try: () => (loading ??= createFvad()),
  catch: (cause) => new Error(`could not load the voice activity detector (WebAssembly): ${String(cause)}`)
}).pipe(
  Effect.tapError(() => Effect.sync(() => (loading = undefined))),
  Effect.orDie
)

export class VoiceDetector implements VoiceClassifier {
  private instance: number
  private readonly samples: number
  /** Samples of an odd-sized frame waiting in `samples` for the rest of their 20 ms piece. */
  private carried = 0
  private voiced = false
  /** Frames under QUIET_POWER in a row (the energy gate). */
  private quietRun = 0
  lastPower = 0

  /** `mode`: WebRTC aggressiveness, 0 (keeps most audio as speech) to 3 (most eager to call it noise). */
  constructor(
    private readonly fvad: FvadModule,
    mode: number
  ) {
    const instance = fvad._fvad_new()
    if (instance === 0) throw new Error("voice activity detector: out of memory")
    if (fvad._fvad_set_mode(instance, mode) !== 0 || fvad._fvad_set_sample_rate(instance, SAMPLE_RATE) !== 0) {
      fvad._fvad_free(instance)
      throw new Error(`voice activity detector: invalid mode ${mode} (expected 0 to 3)`)
    }
    this.instance = instance
    this.samples = fvad._malloc(MAX_DIRECT_SAMPLES * 2)
  }

  isVoiced(frame: Uint8Array): boolean {
    if (this.instance === 0 || frame.length === 0) return false
    const length = frame.length
    const meanPower = meanPowerOf(frame)
    this.lastPower = meanPower
    const direct = this.carried === 0 && (length === 160 || length === 80 || length === 240)
    if (direct) {
      if (meanPower >= QUIET_POWER) this.quietRun = 0
      else if (++this.quietRun > QUIET_SETTLE_FRAMES) return (this.voiced = false)
    }
    // The heap view is replaced when WebAssembly memory grows, so it is read per frame, never kept.
    const heap = this.fvad.HEAP16
    const base = this.samples >> 1
    if (direct) {
      for (let i = 0; i < length; i++) heap[base + i] = MULAW_TO_PCM[frame[i]!]!
      this.voiced = this.fvad._fvad_process(this.instance, this.samples, length) === 1
      return this.voiced
    }
    // Any other size: 20 ms pieces, the remainder carried into the next frame. Voiced when any
    // piece completed in this frame is; a frame completing none repeats the last verdict. The
    // energy gate does not apply (the VAD hears every piece), and counts afresh afterwards.
    this.quietRun = 0
    let anyPiece = false
    let anyVoiced = false
    for (let i = 0; i < length; i++) {
      heap[base + this.carried++] = MULAW_TO_PCM[frame[i]!]!
      if (this.carried === PIECE_SAMPLES) {
        this.carried = 0
        anyPiece = true
        if (this.fvad._fvad_process(this.instance, this.samples, PIECE_SAMPLES) === 1) anyVoiced = true
      }
    }
    if (anyPiece) this.voiced = anyVoiced
    return this.voiced
  }

  measure(frame: Uint8Array): void {
    this.lastPower = meanPowerOf(frame)
    // A piece of an odd-sized frame waiting for its rest would be joined to audio it does not precede.
    this.carried = 0
    // The VAD did not hear this frame: when it hears again, its hangover must run out in front of the gate.
    this.quietRun = 0
    this.voiced = false
  }

  close(): void {
    if (this.instance === 0) return
    this.fvad._fvad_free(this.instance)
    this.fvad._free(this.samples)
    this.instance = 0
    this.voiced = false
  }
}

/** Turn detection parameters (config/defaults.ts documents each). */
export interface TurnSettings {
  readonly vadMode: number
  readonly minSpeechMs: number
  readonly agentMinSpeechMs: number
  readonly turnEndSilenceMs: number
}

export class VoiceActivity extends Effect.Service<VoiceActivity>()("callgate/VoiceActivity", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const fvad = yield* loadFvad
    const settings: TurnSettings = {
      vadMode: config.vadMode,
      minSpeechMs: config.vadMinSpeechMs,
      agentMinSpeechMs: config.vadAgentMinSpeechMs,
      turnEndSilenceMs: config.turnEndSilenceMs
    }
    return {
      settings,
      /** A detector for one direction of one call; the caller closes it when the call ends. */
      detector: (mode: number = settings.vadMode): VoiceDetector => new VoiceDetector(fvad, mode)
    } as const
  })
}) {}
