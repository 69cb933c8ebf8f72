import { describe, expect, it } from "vitest"
import { alawToLinear, linearToAlaw, linearToMulaw, mulawToLinear, telnyxAudioFormat, toObservedMulaw } from "../../src/kernel/AudioFormat.js"

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
    expect(telnyxAudioFormat("G722", 8000)).toBeUndefined()
  })
})
