import { DEFAULT_VOICED_RMS, FRAME_BYTES, FRAME_MS, mulawRms } from "../../sim/Mulaw.js"

export interface TurnDetectorOptions {
  /** A 20 ms frame at or above this RMS (16-bit scale) is voiced. Default 1000 (about -30 dBFS). */
  readonly voicedRms?: number
  /** Silence after speech that ends the caller's turn. Default 700 ms. */
  readonly endSilenceMs?: number
  /** Voiced audio a turn needs before it counts (clicks and pops do not). Default 200 ms. */
  readonly minSpeechMs?: number
}

/**
 * The simplest end-of-turn detector that works on telephone audio, good enough for an example
 * agent: decode each 20 ms mu-law frame, call it voiced when its RMS level crosses a threshold,
 * and end the turn after `endSilenceMs` of unvoiced frames following at least `minSpeechMs` of
 * voiced ones. It counts frames, not wall-clock time, so audio delivered faster than real time
 * gives the same answer. Line noise (RMS ~150-530 in the fixtures) stays under the threshold;
 * a real agent would use a VAD model instead.
 */
export class EnergyTurnDetector {
  private readonly voicedRms: number
  private readonly endSilenceMs: number
  private readonly minSpeechMs: number
  private voicedMs = 0
  private silentMs = 0

  constructor(options: TurnDetectorOptions = {}) {
    this.voicedRms = options.voicedRms ?? DEFAULT_VOICED_RMS
    this.endSilenceMs = options.endSilenceMs ?? 700
    this.minSpeechMs = options.minSpeechMs ?? 200
  }

  /** True while the caller has said something that has not ended yet. */
  get inSpeech(): boolean {
    return this.voicedMs > 0
  }

  /** Feeds caller audio (any length); returns true when a turn ended within it. */
  push(audio: Uint8Array): boolean {
    let ended = false
    for (let start = 0; start < audio.length; start += FRAME_BYTES) {
      const end = Math.min(audio.length, start + FRAME_BYTES)
      const ms = ((end - start) / FRAME_BYTES) * FRAME_MS
      if (mulawRms(audio, start, end) >= this.voicedRms) {
        this.voicedMs += ms
        this.silentMs = 0
      } else if (this.voicedMs > 0) {
        this.silentMs += ms
        if (this.silentMs >= this.endSilenceMs) {
          if (this.voicedMs >= this.minSpeechMs) ended = true
          this.reset()
        }
      }
    }
    return ended
  }

  /** Ends a turn in progress now (the audio stopped arriving); true when it was long enough to count. */
  flush(): boolean {
    const counted = this.voicedMs >= this.minSpeechMs
    this.reset()
    return counted
  }

  reset() {
    this.voicedMs = 0
    this.silentMs = 0
  }
}
