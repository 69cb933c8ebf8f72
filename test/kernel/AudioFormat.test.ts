import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { G722Decoder, G722Encoder, G722NarrowbandDecoder } from "../../src/audio/G722.js"
import {
  alawToLinear,
  bytesPerMs,
  comfortNoiseFrames,
  G722_16K,
  linearToAlaw,
  linearToMulaw,
  MULAW_8K,
  mulawToLinear,
  payloadTranscoders,
  telnyxAudioFormat,
  toObservedMulaw
} from "../../src/kernel/AudioFormat.js"

const speechMulaw = new Uint8Array(readFileSync(new URL("../fixtures/audio/caller-appointment.ulaw", import.meta.url)))

/** The speech at 16 kHz (each sample, then the midpoint to the next), G.722-encoded through one encoder. */
const speechG722 = (): Uint8Array => {
  const wide = new Int16Array(speechMulaw.length * 2)
  speechMulaw.forEach((byte, i) => {
    const next = i + 1 < speechMulaw.length ? mulawToLinear(speechMulaw[i + 1]!) : mulawToLinear(byte)
    wide[2 * i] = mulawToLinear(byte)
    wide[2 * i + 1] = (mulawToLinear(byte) + next) >> 1
  })
  const codes = new Uint8Array(speechMulaw.length)
  new G722Encoder().encode(wide, wide.length, codes)
  return codes
}

/** What the observer must read of G.722 codes: one decoder of the low band (the 8 kHz audio) over the stream, as mu-law. */
const expectedObserved = (codes: Uint8Array): Uint8Array => {
  const pcm = new Int16Array(codes.length)
  new G722NarrowbandDecoder().decode(codes, codes.length, pcm)
  return Uint8Array.from(pcm, linearToMulaw)
}

const frames = (bytes: Uint8Array, size: number): Array<Uint8Array> =>
  Array.from({ length: Math.ceil(bytes.length / size) }, (_, i) => bytes.subarray(i * size, (i + 1) * size))

describe("audio formats", () => {
  it("G.711 reference points: A-law and mu-law silence, extremes and sign", () => {
    expect([alawToLinear(0xd5), alawToLinear(0x55), alawToLinear(0xaa), alawToLinear(0x2a)]).toEqual([8, -8, 32256, -32256])
    expect([mulawToLinear(0xff), mulawToLinear(0x7f), mulawToLinear(0x80), mulawToLinear(0x00)]).toEqual([0, 0, 32124, -32124])
    expect([linearToAlaw(0), linearToAlaw(-1), linearToMulaw(0), linearToMulaw(32767), linearToMulaw(-32768)]).toEqual([0xd5, 0x55, 0xff, 0x80, 0x00])
  })

  it("every A-law and mu-law code decodes and encodes back to itself (mu-law's negative zero to the positive one)", () => {
    for (let byte = 0; byte < 256; byte++) {
      expect(linearToAlaw(alawToLinear(byte))).toBe(byte)
      expect(linearToMulaw(mulawToLinear(byte))).toBe(byte === 0x7f ? 0xff : byte)
    }
  })

  it("the observer's conversion: A-law and L16 (big-endian, 8 and 16 kHz) become the mu-law of the same samples", () => {
    const samples = [0, 100, -100, 1000, -1000, 12000, -12000, 32767, -32768]
    const mulaw = samples.map(linearToMulaw)
    expect([...toObservedMulaw({ encoding: "audio/x-alaw", sampleRate: 8000 })(Uint8Array.from(samples.map(linearToAlaw)))]).toEqual(
      samples.map((s) => linearToMulaw(alawToLinear(linearToAlaw(s))))
    )
    const be = (values: ReadonlyArray<number>) => {
      const out = Buffer.alloc(values.length * 2)
      values.forEach((v, i) => out.writeInt16BE(v, i * 2))
      return new Uint8Array(out)
    }
    expect([...toObservedMulaw({ encoding: "audio/L16", sampleRate: 8000 })(be(samples))]).toEqual(mulaw)
    expect([...toObservedMulaw({ encoding: "audio/L16", sampleRate: 16000 })(be(samples.flatMap((s) => [s, s])))]).toEqual(mulaw)
    const same = new Uint8Array([1, 2, 3])
    expect(toObservedMulaw({ encoding: "audio/x-mulaw", sampleRate: 8000 })(same)).toBe(same)
  })

  it("Telnyx's media_format names: PCMU and PCMA at 8 kHz, L16 at 8 or 16 kHz; nothing else", () => {
    expect(telnyxAudioFormat("PCMU", 8000)).toEqual({ encoding: "audio/x-mulaw", sampleRate: 8000 })
    expect(telnyxAudioFormat("PCMA", 8000)).toEqual({ encoding: "audio/x-alaw", sampleRate: 8000 })
    expect(telnyxAudioFormat("L16", 16000)).toEqual({ encoding: "audio/L16", sampleRate: 16000 })
    expect(telnyxAudioFormat("PCMA", 16000)).toBeUndefined()
    expect(telnyxAudioFormat("OPUS", 8000)).toBeUndefined()
  })

  it("G.722: Telnyx's G722 at the RTP rate (8000) or the audio's (16000) is 16 kHz audio, 8 bytes a millisecond", () => {
    expect(telnyxAudioFormat("G722", 8000)).toEqual({ encoding: "audio/G722", sampleRate: 16000 })
    expect(telnyxAudioFormat("G722", 16000)).toEqual(G722_16K)
    expect(bytesPerMs(G722_16K)).toBe(8)
  })

  it("G.722 for the observer: each direction's converter decodes its own stream's low band, frame by frame, to mu-law", () => {
    const codes = speechG722()
    const expected = expectedObserved(codes)
    const caller = toObservedMulaw(G722_16K)
    const agent = toObservedMulaw(G722_16K)
    expect(caller).not.toBe(agent)
    const seen: Array<number> = []
    // The two directions interleaved, as a call's frames are: neither disturbs the other's decoder.
    for (const frame of frames(codes, 160)) {
      seen.push(...caller(frame))
      agent(Uint8Array.from(frame).reverse())
    }
    expect(Uint8Array.from(seen)).toEqual(expected)
  })

  it("G.722 transcoding for a mu-law agent: the caller's audio decoded once per call, the agent's encoded by one encoder, both frame by frame", () => {
    const codes = speechG722()
    const transcoders = payloadTranscoders(G722_16K, MULAW_8K)!
    const toAgent = frames(codes, 160).map((frame) => Buffer.from(transcoders.toAgent(Buffer.from(frame).toString("base64")), "base64"))
    expect(new Uint8Array(Buffer.concat(toAgent))).toEqual(expectedObserved(codes))

    // The agent's mu-law speech, in 20 ms frames, to G.722: decoded again it is the speech (16 kHz, 22 samples of codec delay).
    const toCarrier = frames(speechMulaw, 160).map((frame) => Buffer.from(transcoders.toCarrier(Buffer.from(frame).toString("base64")), "base64"))
    expect(toCarrier.every((frame, i) => frame.length === Math.min(160, speechMulaw.length - i * 160))).toBe(true)
    const carried = new Uint8Array(Buffer.concat(toCarrier))
    const pcm = new Int16Array(carried.length * 2)
    new G722Decoder().decode(carried, carried.length, pcm)
    let signal = 0
    let noise = 0
    for (let i = 0; i < speechMulaw.length - 12; i++) {
      const sample = mulawToLinear(speechMulaw[i]!)
      signal += sample ** 2
      noise += (sample - pcm[2 * i + 22 + 1]!) ** 2
    }
    expect(10 * Math.log10(signal / noise)).toBeGreaterThan(20)
  })

  it("G.722 comfort noise: 20 ms frames of 160 bytes that decode to quiet noise", () => {
    const noise = comfortNoiseFrames(G722_16K)
    expect(noise.length).toBeGreaterThan(1)
    const decoder = new G722Decoder()
    const pcm = new Int16Array(320)
    let loudest = 0
    for (const frame of noise) {
      const bytes = Buffer.from(frame, "base64")
      expect(bytes.length).toBe(160)
      decoder.decode(bytes, bytes.length, pcm)
      for (const sample of pcm) loudest = Math.max(loudest, Math.abs(sample))
    }
    expect(loudest).toBeGreaterThan(0)
    expect(loudest).toBeLessThan(100)
  })
})
