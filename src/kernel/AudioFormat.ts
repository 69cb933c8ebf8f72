import { G722_SAMPLE_RATE, G722Encoder, G722NarrowbandDecoder } from "../audio/G722.js"

/**
 * The audio formats a carrier stream may carry (docs/calls.md, "Audio formats"), and the
 * conversion of each to what the turn observer reads (8 kHz mu-law, the VAD's input). Twilio
 * streams are always 8 kHz mu-law; Telnyx streams may be PCMU, PCMA (A-law), L16 (16-bit linear,
 * big-endian as RTP carries it) at 8 or 16 kHz, or G.722 (16 kHz, src/audio/G722.ts). The
 * conversion runs per 20 ms frame: it is chosen once per call and direction (`toObservedMulaw`),
 * works through lookup tables (and, for G.722, a decoder made with it) into one buffer shared by
 * every call (the relay is synchronous), and allocates nothing per frame.
 */

export type AudioEncoding = "audio/x-mulaw" | "audio/x-alaw" | "audio/L16" | "audio/G722"

export interface AudioFormat {
  readonly encoding: AudioEncoding
  readonly sampleRate: 8000 | 16000
}

export const MULAW_8K: AudioFormat = { encoding: "audio/x-mulaw", sampleRate: 8000 }
export const G722_16K: AudioFormat = { encoding: "audio/G722", sampleRate: G722_SAMPLE_RATE }

/** `start.mediaFormat` as the agent reads it (Twilio's shape). */
export const agentMediaFormat = (format: AudioFormat) => ({ encoding: format.encoding, sampleRate: format.sampleRate, channels: 1 }) as const

/** The format a Telnyx `start.media_format` names; undefined for one callgate does not relay. */
export const telnyxAudioFormat = (encoding: string, sampleRate: number): AudioFormat | undefined => {
  if (sampleRate !== 8000 && sampleRate !== 16000) return undefined
  switch (encoding) {
    case "PCMU":
    case "audio/x-mulaw":
      return sampleRate === 8000 ? MULAW_8K : undefined
    case "PCMA":
    case "audio/x-alaw":
      return sampleRate === 8000 ? { encoding: "audio/x-alaw", sampleRate: 8000 } : undefined
    case "L16":
    case "audio/L16":
      return { encoding: "audio/L16", sampleRate }
    case "G722":
    case "audio/G722":
      // 16 kHz audio whatever the rate says: RTP's clock rate for G.722 is 8000 (RFC 3551), so both are seen.
      return G722_16K
    default:
      return undefined
  }
}

// ---- G.711 (ITU-T G.711), the classic table-free definitions, used to build the tables ----

const MULAW_BIAS = 0x84
const MULAW_CLIP = 32635

/** 16-bit linear to mu-law. */
export const linearToMulaw = (sample: number): number => {
  const sign = sample < 0 ? 0x80 : 0
  let magnitude = Math.min(sample < 0 ? -sample : sample, MULAW_CLIP) + MULAW_BIAS
  let exponent = 7
  for (let mask = 0x4000; (magnitude & mask) === 0 && exponent > 0; mask >>= 1) exponent--
  const mantissa = (magnitude >> (exponent + 3)) & 0x0f
  magnitude = ~(sign | (exponent << 4) | mantissa)
  return magnitude & 0xff
}

/** mu-law to 16-bit linear. */
export const mulawToLinear = (byte: number): number => {
  const u = ~byte & 0xff
  const magnitude = (((u & 0x0f) << 3) + MULAW_BIAS) << ((u & 0x70) >> 4)
  return u & 0x80 ? MULAW_BIAS - magnitude : magnitude - MULAW_BIAS
}

/** A-law to 16-bit linear. */
export const alawToLinear = (byte: number): number => {
  const a = byte ^ 0x55
  const exponent = (a & 0x70) >> 4
  let magnitude = (a & 0x0f) << 4
  magnitude += exponent === 0 ? 8 : 0x108
  if (exponent > 1) magnitude <<= exponent - 1
  return a & 0x80 ? magnitude : -magnitude
}

/** 16-bit linear to A-law. */
export const linearToAlaw = (sample: number): number => {
  const sign = sample >= 0 ? 0x80 : 0
  let magnitude = sample >= 0 ? sample : -sample - 1
  if (magnitude > 32767) magnitude = 32767
  let exponent = 7
  for (let mask = 0x4000; (magnitude & mask) === 0 && exponent > 0; mask >>= 1) exponent--
  const mantissa = exponent === 0 ? (magnitude >> 4) & 0x0f : (magnitude >> (exponent + 3)) & 0x0f
  return (sign | (exponent << 4) | mantissa) ^ 0x55
}

/** mu-law of every 16-bit sample, indexed by its two's complement bits (64 KiB, built once). */
const LINEAR_TO_MULAW = Uint8Array.from({ length: 65536 }, (_, bits) => linearToMulaw((bits << 16) >> 16))
const ALAW_TO_MULAW = Uint8Array.from({ length: 256 }, (_, byte) => linearToMulaw(alawToLinear(byte)))

/** The largest frame the observer converts at once (bigger frames are cut: the observer sees the first part). */
const MAX_OBSERVED_BYTES = 64 * 1024
const observed = Buffer.allocUnsafeSlow(MAX_OBSERVED_BYTES)

const alawFrame = (bytes: Uint8Array): Uint8Array => {
  const length = Math.min(bytes.length, MAX_OBSERVED_BYTES)
  for (let i = 0; i < length; i++) observed[i] = ALAW_TO_MULAW[bytes[i]!]!
  return observed.subarray(0, length)
}

const l16Frame8k = (bytes: Uint8Array): Uint8Array => {
  const samples = Math.min(bytes.length >> 1, MAX_OBSERVED_BYTES)
  for (let i = 0, j = 0; i < samples; i++, j += 2) {
    // Big-endian signed 16 bits: their two's complement bits are the table's index.
    observed[i] = LINEAR_TO_MULAW[(bytes[j]! << 8) | bytes[j + 1]!]!
  }
  return observed.subarray(0, samples)
}

const l16Frame16k = (bytes: Uint8Array): Uint8Array => {
  // Two 16 kHz samples make one 8 kHz sample: their mean (a first low-pass before decimation).
  const samples = Math.min(bytes.length >> 2, MAX_OBSERVED_BYTES)
  for (let i = 0, j = 0; i < samples; i++, j += 4) {
    const first = (((bytes[j]! << 8) | bytes[j + 1]!) << 16) >> 16
    const second = (((bytes[j + 2]! << 8) | bytes[j + 3]!) << 16) >> 16
    observed[i] = LINEAR_TO_MULAW[((first + second) >> 1) & 0xffff]!
  }
  return observed.subarray(0, samples)
}

/** 8 kHz samples decoded from G.722 (one per byte), shared by every call as `observed` is. */
const decodedG722 = new Int16Array(MAX_OBSERVED_BYTES)

/**
 * A G.722 stream's converter: its own decoder (G.722 is adaptive: one per stream, fed every frame
 * in order) of the low band alone, which is the audio at 8 kHz already (G722NarrowbandDecoder).
 */
const g722Frames = (): ((bytes: Uint8Array) => Uint8Array) => {
  const decoder = new G722NarrowbandDecoder()
  return (bytes) => {
    const samples = decoder.decode(bytes, Math.min(bytes.length, MAX_OBSERVED_BYTES), decodedG722)
    for (let i = 0; i < samples; i++) observed[i] = LINEAR_TO_MULAW[decodedG722[i]! & 0xffff]!
    return observed.subarray(0, samples)
  }
}

const unchanged = (bytes: Uint8Array): Uint8Array => bytes

/**
 * The frame converter for one direction of a call in `format`: bytes in the format to 8 kHz mu-law
 * for the turn observer, in a buffer shared by every call and valid until the next conversion.
 * Made once per call and direction: a G.722 converter holds that direction's decoder, so it must
 * see every frame of its direction, in order, and no other.
 */
export const toObservedMulaw = (format: AudioFormat): ((bytes: Uint8Array) => Uint8Array) => {
  if (format.encoding === "audio/x-alaw") return alawFrame
  if (format.encoding === "audio/L16") return format.sampleRate === 16000 ? l16Frame16k : l16Frame8k
  if (format.encoding === "audio/G722") return g722Frames()
  return unchanged
}

/** Bytes of one millisecond of audio in the format (8 for G.711 and G.722, 16 or 32 for L16). */
export const bytesPerMs = (format: AudioFormat): number =>
  format.encoding === "audio/L16" ? (format.sampleRate / 1000) * 2 : format.encoding === "audio/G722" ? 8 : format.sampleRate / 1000

// ---- Transcoding for agents that speak only 8 kHz mu-law (environment field agentAudioFormat) ----

const MULAW_TO_ALAW = Uint8Array.from({ length: 256 }, (_, byte) => linearToAlaw(mulawToLinear(byte)))
const MULAW_TO_LINEAR = Int16Array.from({ length: 256 }, (_, byte) => mulawToLinear(byte))
const incoming = Buffer.allocUnsafeSlow(MAX_OBSERVED_BYTES * 4)
const outgoing = Buffer.allocUnsafeSlow(MAX_OBSERVED_BYTES * 4)

const decodePayload = (payload: string): Buffer => incoming.subarray(0, incoming.write(payload, 0, "base64"))

/** Mu-law upsampled to 16 kHz for the G.722 encoder, shared by every call. */
const upsampled = new Int16Array(MAX_OBSERVED_BYTES * 8)

/**
 * Mu-law to G.722 for one call: each 8 kHz sample becomes two at 16 kHz, the second the sample and
 * the first halfway from the one before (linear interpolation: a hold would put louder images of
 * the voice into the 4 to 8 kHz band G.722 codes), then one encoder for the call's whole agent
 * audio. (Coding the 8 kHz samples as the low band alone would cost a third, but G.722's band split
 * then dulls the voice near 4 kHz: 15 dB signal to noise on the test recordings, against 29.)
 */
const mulawToG722 = (): ((payload: string) => string) => {
  const encoder = new G722Encoder()
  let previous = 0
  return (payload) => {
    const bytes = decodePayload(payload)
    for (let i = 0, j = 0; i < bytes.length; i++, j += 2) {
      const sample = MULAW_TO_LINEAR[bytes[i]!]!
      upsampled[j] = (previous + sample) >> 1
      upsampled[j + 1] = sample
      previous = sample
    }
    return outgoing.toString("base64", 0, encoder.encode(upsampled, bytes.length * 2, outgoing))
  }
}

const mulawTo = (format: AudioFormat): ((payload: string) => string) => {
  if (format.encoding === "audio/G722") return mulawToG722()
  if (format.encoding === "audio/x-alaw") {
    return (payload) => {
      const bytes = decodePayload(payload)
      for (let i = 0; i < bytes.length; i++) outgoing[i] = MULAW_TO_ALAW[bytes[i]!]!
      return outgoing.toString("base64", 0, bytes.length)
    }
  }
  // L16, big-endian; at 16 kHz each sample is held for two (a zero-order hold: mu-law's band fits in it).
  const repeat = format.sampleRate / 8000
  return (payload) => {
    const bytes = decodePayload(payload)
    let j = 0
    for (let i = 0; i < bytes.length; i++) {
      const sample = MULAW_TO_LINEAR[bytes[i]!]!
      const high = (sample >> 8) & 0xff
      const low = sample & 0xff
      for (let r = 0; r < repeat; r++, j += 2) {
        outgoing[j] = high
        outgoing[j + 1] = low
      }
    }
    return outgoing.toString("base64", 0, j)
  }
}

/**
 * The per-call payload transcoders between the carrier's format and the agent's (8 kHz mu-law when
 * the environment's agentAudioFormat asks for it): base64 in, base64 out, through the tables and
 * shared buffers above (for G.722, through a decoder and an encoder made here: one pair per call,
 * kept for the call's life). Undefined when the two are the same format (the relay pastes payloads).
 */
export const payloadTranscoders = (
  carrier: AudioFormat,
  agent: AudioFormat
): { readonly toAgent: (payload: string) => string; readonly toCarrier: (payload: string) => string } | undefined => {
  if (carrier.encoding === agent.encoding && carrier.sampleRate === agent.sampleRate) return undefined
  if (agent.encoding !== "audio/x-mulaw" || agent.sampleRate !== 8000) return undefined
  const observe = toObservedMulaw(carrier)
  return {
    toAgent: (payload) => {
      const mulaw = observe(decodePayload(payload)) as Buffer
      return mulaw.toString("base64")
    },
    toCarrier: mulawTo(carrier)
  }
}

// ---- Comfort noise (docs/reliability.md, "Agent failover") ----

/** Linear 16-bit amplitude of comfort noise: about -66 dBFS, audible as a live line, never as speech. */
const COMFORT_NOISE_AMPLITUDE = 16
const COMFORT_NOISE_FRAMES = 8
const comfortNoiseCache = new Map<string, ReadonlyArray<string>>()

/**
 * 20 ms frames of quiet noise in the format, base64, to cycle through while a call has no agent:
 * the caller hears a live line, not dead air. Made once per format (a fixed pseudo-random series),
 * so a frame costs nothing at send time.
 */
export const comfortNoiseFrames = (format: AudioFormat): ReadonlyArray<string> => {
  const key = `${format.encoding}/${format.sampleRate}`
  const cached = comfortNoiseCache.get(key)
  if (cached !== undefined) return cached
  let seed = 0x2545f491
  const nextSample = () => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0
    return ((seed >>> 16) % (2 * COMFORT_NOISE_AMPLITUDE + 1)) - COMFORT_NOISE_AMPLITUDE
  }
  const samplesPerFrame = (format.sampleRate / 1000) * 20
  const frames: Array<string> = []
  // G.722: the frames in order through one encoder (the carrier's decoder adapts to the noise).
  const encoder = format.encoding === "audio/G722" ? new G722Encoder() : undefined
  for (let f = 0; f < COMFORT_NOISE_FRAMES; f++) {
    const bytes = Buffer.alloc(bytesPerMs(format) * 20)
    const samples = new Int16Array(samplesPerFrame)
    for (let i = 0; i < samplesPerFrame; i++) {
      const sample = nextSample()
      if (format.encoding === "audio/L16") bytes.writeInt16BE(sample, i * 2)
      else if (encoder !== undefined) samples[i] = sample
      else bytes[i] = format.encoding === "audio/x-alaw" ? linearToAlaw(sample) : linearToMulaw(sample)
    }
    encoder?.encode(samples, samplesPerFrame, bytes)
    frames.push(bytes.toString("base64"))
  }
  comfortNoiseCache.set(key, frames)
  return frames
}
