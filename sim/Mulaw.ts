import { MULAW_SILENCE, MULAW_TO_PCM } from "../src/audio/Mulaw.js"

/**
 * G.711 mu-law, 8 kHz mono: what Twilio and Telnyx (PCMU) carry. One 20 ms frame is 160 bytes.
 * Decoding is a 256-entry table; encoding is the classic biased-segment algorithm. Digital silence
 * is 0xFF (linear +0).
 */
export const SAMPLE_RATE = 8000
export const FRAME_MS = 20
export const FRAME_BYTES = 160
export { MULAW_SILENCE }

const BIAS = 0x84
const CLIP = 32635

/** Linear 16-bit value of every mu-law byte (the server's own table: one G.711 decoder in the repository). */
export const MULAW_TO_LINEAR: Int16Array = MULAW_TO_PCM

/** One linear 16-bit sample to its mu-law byte. */
export const linearToMulaw = (sample: number): number => {
  let s = Math.max(-32768, Math.min(32767, Math.round(sample)))
  const sign = s < 0 ? 0x80 : 0
  if (s < 0) s = -s
  if (s > CLIP) s = CLIP
  s += BIAS
  let exponent = 7
  for (let mask = 0x4000; (s & mask) === 0 && exponent > 0; mask >>= 1) exponent--
  const mantissa = (s >> (exponent + 3)) & 0x0f
  return ~(sign | (exponent << 4) | mantissa) & 0xff
}

/** Linear samples (any numeric array, clipped to 16 bits) to mu-law bytes. */
export const encodeMulaw = (samples: ArrayLike<number>): Buffer => {
  const out = Buffer.allocUnsafe(samples.length)
  for (let i = 0; i < samples.length; i++) out[i] = linearToMulaw(samples[i]!)
  return out
}

export const decodeMulaw = (bytes: Uint8Array): Int16Array => {
  const out = new Int16Array(bytes.length)
  for (let i = 0; i < bytes.length; i++) out[i] = MULAW_TO_LINEAR[bytes[i]!]!
  return out
}

/** Root-mean-square level of mu-law audio on the 16-bit linear scale (0..32767). No allocation. */
export const mulawRms = (bytes: Uint8Array, start = 0, end = bytes.length): number => {
  if (end <= start) return 0
  let sum = 0
  for (let i = start; i < end; i++) {
    const v = MULAW_TO_LINEAR[bytes[i]!]!
    sum += v * v
  }
  return Math.sqrt(sum / (end - start))
}

/**
 * Default voiced/silent boundary of the energy detector: RMS 1000 (about -30 dBFS). Measured on
 * the fixtures: line noise peaks at RMS ~530 per frame; speech runs 1000-9000, and speech over
 * line noise still crosses 1000 on most syllables. Stamped silence (see FrameStamp) stays under 100.
 */
export const DEFAULT_VOICED_RMS = 1000

/** True when a frame is loud enough to be speech for the simple energy detector. */
export const isVoicedFrame = (bytes: Uint8Array, threshold = DEFAULT_VOICED_RMS, start = 0, end = bytes.length): boolean =>
  mulawRms(bytes, start, end) >= threshold

/** Pads mu-law audio with silence up to a whole number of 20 ms frames (copies only when needed). */
export const padToFrames = (audio: Buffer): Buffer => {
  const rest = audio.length % FRAME_BYTES
  if (rest === 0) return audio
  const padded = Buffer.alloc(audio.length + FRAME_BYTES - rest, MULAW_SILENCE)
  audio.copy(padded)
  return padded
}

/** The 20 ms frames of framed audio, as views (no copy). */
export const framesOf = (audio: Buffer): Array<Buffer> => {
  const framed = padToFrames(audio)
  const frames: Array<Buffer> = []
  for (let offset = 0; offset < framed.length; offset += FRAME_BYTES) frames.push(framed.subarray(offset, offset + FRAME_BYTES))
  return frames
}

export const frameCount = (audio: Buffer): number => Math.ceil(audio.length / FRAME_BYTES)

export const durationMs = (audio: Buffer): number => frameCount(audio) * FRAME_MS
