import { G722Decoder, G722Encoder } from "../src/audio/G722.js"
import { alawToLinear, linearToAlaw } from "../src/kernel/AudioFormat.js"
import { FRAME_BYTES, linearToMulaw, MULAW_TO_LINEAR } from "./Mulaw.js"

/**
 * The codecs a simulated Telnyx stream can carry (the environment field telnyxStreamCodec's
 * values): the simulator's audio is 8 kHz mu-law throughout (AudioSource), converted to the codec
 * frame by frame as it is sent, and the gateway's audio converted back to mu-law as it arrives, so
 * the voice detector and the playout clock work the same in every codec.
 */
export const SIM_STREAM_CODECS = ["PCMU", "PCMA", "L16;rate=8000", "L16;rate=16000", "G722"] as const
export type SimStreamCodec = (typeof SIM_STREAM_CODECS)[number]

export const isSimStreamCodec = (text: string): text is SimStreamCodec => (SIM_STREAM_CODECS as ReadonlyArray<string>).includes(text)

export interface SimAudioCodec {
  readonly codec: SimStreamCodec
  /** The `start.media_format` Telnyx sends for a stream in the codec. */
  readonly mediaFormat: { readonly encoding: string; readonly sample_rate: number }
  /** One 20 ms frame of 8 kHz mu-law (160 bytes) in the codec; the buffer is reused by the next call. */
  readonly encode: (mulaw: Buffer) => Buffer
  /** Audio in the codec as 8 kHz mu-law (a new buffer). */
  readonly decode: (bytes: Buffer) => Buffer
}

const identity = (bytes: Buffer) => bytes

/**
 * mu-law's samples for the linear codecs: G.711's table, except that 0x7F ("negative zero") is -1
 * rather than 0, so every byte survives mu-law to L16 and back (0 would come back as 0xFF, altering
 * the bench's frame stamps).
 */
const LINEAR: Int16Array = Int16Array.from(MULAW_TO_LINEAR)
LINEAR[0x7f] = -1

/** 8 kHz mu-law to 16 kHz samples into `out`: each sample after one interpolated between it and `previous`; returns the last sample. */
const upsample = (mulaw: Buffer, out: Int16Array, previous: number): number => {
  for (let i = 0; i < mulaw.length; i++) {
    const sample = LINEAR[mulaw[i]!]!
    out[i * 2] = (previous + sample) >> 1
    out[i * 2 + 1] = sample
    previous = sample
  }
  return previous
}

/** A codec instance for one call (the 16 kHz upsampler keeps the previous frame's last sample; G.722 its coder states). */
export const simAudioCodec = (codec: SimStreamCodec): SimAudioCodec => {
  switch (codec) {
    case "PCMU":
      return { codec, mediaFormat: { encoding: "PCMU", sample_rate: 8000 }, encode: identity, decode: identity }
    case "PCMA": {
      const out = Buffer.alloc(FRAME_BYTES)
      return {
        codec,
        mediaFormat: { encoding: "PCMA", sample_rate: 8000 },
        encode: (mulaw) => {
          const frame = mulaw.length === FRAME_BYTES ? out : Buffer.alloc(mulaw.length)
          for (let i = 0; i < mulaw.length; i++) frame[i] = linearToAlaw(MULAW_TO_LINEAR[mulaw[i]!]!)
          return frame
        },
        decode: (bytes) => Buffer.from(bytes.map((byte) => linearToMulaw(alawToLinear(byte))))
      }
    }
    case "L16;rate=8000": {
      const out = Buffer.alloc(FRAME_BYTES * 2)
      return {
        codec,
        mediaFormat: { encoding: "L16", sample_rate: 8000 },
        encode: (mulaw) => {
          const frame = mulaw.length === FRAME_BYTES ? out : Buffer.alloc(mulaw.length * 2)
          for (let i = 0; i < mulaw.length; i++) frame.writeInt16BE(LINEAR[mulaw[i]!]!, i * 2)
          return frame
        },
        decode: (bytes) => {
          const mulaw = Buffer.alloc(bytes.length >> 1)
          for (let i = 0; i < mulaw.length; i++) mulaw[i] = linearToMulaw(bytes.readInt16BE(i * 2))
          return mulaw
        }
      }
    }
    case "L16;rate=16000": {
      const out = Buffer.alloc(FRAME_BYTES * 4)
      let previous = 0
      return {
        codec,
        mediaFormat: { encoding: "L16", sample_rate: 16000 },
        // Twice the samples: each 8 kHz sample preceded by the mean of it and the one before (linear interpolation).
        encode: (mulaw) => {
          const frame = mulaw.length === FRAME_BYTES ? out : Buffer.alloc(mulaw.length * 4)
          for (let i = 0; i < mulaw.length; i++) {
            const sample = LINEAR[mulaw[i]!]!
            frame.writeInt16BE((previous + sample) >> 1, i * 4)
            frame.writeInt16BE(sample, i * 4 + 2)
            previous = sample
          }
          return frame
        },
        // Half the samples: the second of each pair, the one the encoder above carries exactly (and
        // callgate's mu-law transcoding holds each sample for two), so 8 kHz mu-law survives the round trip byte for byte.
        decode: (bytes) => {
          const mulaw = Buffer.alloc(bytes.length >> 2)
          for (let i = 0; i < mulaw.length; i++) mulaw[i] = linearToMulaw(bytes.readInt16BE(i * 4 + 2))
          return mulaw
        }
      }
    }
    case "G722": {
      // 16 kHz audio, 8 bits per pair of samples: 160 bytes per 20 ms, through callgate's own G.722 coder (src/audio/G722.ts).
      const encoder = new G722Encoder()
      const decoder = new G722Decoder()
      const pcm = new Int16Array(FRAME_BYTES * 2)
      const out = Buffer.alloc(FRAME_BYTES)
      let previous = 0
      let decoded = new Int16Array(FRAME_BYTES * 2)
      return {
        codec,
        mediaFormat: { encoding: "G722", sample_rate: 16000 },
        encode: (mulaw) => {
          const samples = mulaw.length === FRAME_BYTES ? pcm : new Int16Array(mulaw.length * 2)
          const frame = mulaw.length === FRAME_BYTES ? out : Buffer.alloc(mulaw.length)
          previous = upsample(mulaw, samples, previous)
          encoder.encode(samples, mulaw.length * 2, frame)
          return frame
        },
        // Half the samples: the second of each pair, as for L16 at 16 kHz.
        decode: (bytes) => {
          if (decoded.length < bytes.length * 2) decoded = new Int16Array(bytes.length * 2)
          decoder.decode(bytes, bytes.length, decoded)
          const mulaw = Buffer.alloc(bytes.length)
          for (let i = 0; i < mulaw.length; i++) mulaw[i] = linearToMulaw(decoded[i * 2 + 1]!)
          return mulaw
        }
      }
    }
  }
}

/**
 * The codec a TeXML `<Stream>` asks Telnyx for (its `codec` and `bidirectionalSamplingRate`
 * attributes), in the environment field's spelling: what a simulated Telnyx streams in when nothing
 * else is said. PCMU when it names none; check it with isSimStreamCodec.
 */
export const codecOfStreamAttributes = (attributes: Readonly<Record<string, string>>): string => {
  const codec = attributes.codec ?? attributes.bidirectionalCodec ?? "PCMU"
  return codec === "L16" ? `L16;rate=${attributes.bidirectionalSamplingRate ?? "8000"}` : codec
}
