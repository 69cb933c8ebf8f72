import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { G722_FRAME_BYTES, G722Decoder, G722Encoder, G722NarrowbandDecoder } from "../../src/audio/G722.js"
import { mulawToLinear } from "../../src/kernel/AudioFormat.js"

const fixture = (name: string) => new Uint8Array(readFileSync(new URL(`../fixtures/audio/${name}`, import.meta.url)))

/** A mu-law recording at 16 kHz: each sample, then the midpoint to the next (as the reference encodings were made). */
const speech16k = (name: string): Int16Array => {
  const mulaw = fixture(name)
  const out = new Int16Array(mulaw.length * 2)
  for (let i = 0; i < mulaw.length; i++) {
    const sample = mulawToLinear(mulaw[i]!)
    const next = i + 1 < mulaw.length ? mulawToLinear(mulaw[i + 1]!) : sample
    out[2 * i] = sample
    out[2 * i + 1] = (sample + next) >> 1
  }
  return out
}

/** 2 s of a clipped sine sweeping 50 Hz to 7.95 kHz with spikes (fixtures/audio/README.md: loud-sweep.g722). */
const loudSweep = (): Int16Array => {
  const out = new Int16Array(32000)
  let phase = 0
  for (let n = 0; n < out.length; n++) {
    const frequency = 50 + (7900 * n) / out.length
    phase += (2 * Math.PI * frequency) / 16000
    const value = Math.round(45000 * Math.sin(phase)) + (n % 997 === 0 ? 30000 : 0)
    out[n] = Math.max(-32768, Math.min(32767, value))
  }
  return out
}

/** Encoded in 20 ms frames through one encoder, as a call's audio is. */
const encodeFrames = (pcm: Int16Array): Uint8Array => {
  const encoder = new G722Encoder()
  const codes = new Uint8Array(pcm.length >> 1)
  for (let at = 0; at < pcm.length; at += 2 * G722_FRAME_BYTES) {
    const count = Math.min(2 * G722_FRAME_BYTES, pcm.length - at)
    encoder.encode(pcm.subarray(at, at + count), count, codes, at >> 1)
  }
  return codes
}

const decodeFrames = (codes: Uint8Array): Int16Array => {
  const decoder = new G722Decoder()
  const pcm = new Int16Array(codes.length * 2)
  for (let at = 0; at < codes.length; at += G722_FRAME_BYTES) {
    const length = Math.min(G722_FRAME_BYTES, codes.length - at)
    decoder.decode(codes.subarray(at, at + length), length, pcm, at * 2)
  }
  return pcm
}

const sha256 = (pcm: Int16Array) => createHash("sha256").update(Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength)).digest("hex")

/** The codec's delay, analysis and synthesis QMF together: 22 samples at 16 kHz. */
const DELAY = 22

const snrDb = (input: Int16Array, output: Int16Array): number => {
  let signal = 0
  let noise = 0
  for (let i = 0; i + DELAY < input.length; i++) {
    signal += input[i]! ** 2
    noise += (input[i]! - output[i + DELAY]!) ** 2
  }
  return 10 * Math.log10(signal / noise)
}

describe("G.722", () => {
  it("encodes exactly as FFmpeg's independent G.722 encoder does: speech, and a clipped full-scale sweep", () => {
    expect(encodeFrames(speech16k("caller-appointment.ulaw"))).toEqual(fixture("g722/caller-appointment.g722"))
    expect(encodeFrames(loudSweep())).toEqual(fixture("g722/loud-sweep.g722"))
  })

  it("decodes exactly as FFmpeg's decoder does (the SHA-256 of its 16-bit output)", () => {
    expect(sha256(decodeFrames(fixture("g722/caller-appointment.g722")))).toBe("402b10a8ae403660d28714774383ec111e60129f6c5a383c639702c6fa90b154")
    expect(sha256(decodeFrames(fixture("g722/loud-sweep.g722")))).toBe("47f9854f24db883c067daacf23a70dfc786d5757e867e394685587f4790ed9bc")
  })

  it("speech round trip (encode, decode): more than 20 dB signal to noise on every recording", () => {
    for (const name of ["caller-appointment.ulaw", "caller-appointment-noisy.ulaw", "caller-account.ulaw", "agent-greeting.ulaw"]) {
      const speech = speech16k(name)
      expect(snrDb(speech, decodeFrames(encodeFrames(speech))), name).toBeGreaterThan(20)
    }
  })

  it("silence encodes and decodes to near silence", () => {
    const decoded = decodeFrames(encodeFrames(new Int16Array(16000)))
    expect(Math.max(...decoded.map(Math.abs))).toBeLessThanOrEqual(8)
  })

  it("frame size does not matter: one call over the whole stream gives the same codes as 20 ms frames", () => {
    const speech = speech16k("caller-account.ulaw")
    const whole = new Uint8Array(speech.length >> 1)
    expect(new G722Encoder().encode(speech, speech.length, whole)).toBe(speech.length >> 1)
    expect(whole).toEqual(encodeFrames(speech))
    const pcm = new Int16Array(speech.length)
    expect(new G722Decoder().decode(whole, whole.length, pcm)).toBe(speech.length)
    expect(pcm).toEqual(decodeFrames(whole))
  })

  it("the decoder is deterministic: two decoders, the same codes, the same samples; state is per stream", () => {
    const codes = fixture("g722/caller-appointment.g722")
    expect(decodeFrames(codes)).toEqual(decodeFrames(codes))
    // A decoder that already decoded other audio is in another state: its first samples differ.
    const used = new G722Decoder()
    used.decode(fixture("g722/loud-sweep.g722"), 1600, new Int16Array(3200))
    const again = new Int16Array(320)
    used.decode(codes.subarray(4000), 160, again)
    const fresh = new Int16Array(320)
    new G722Decoder().decode(codes.subarray(4000), 160, fresh)
    expect(again).not.toEqual(fresh)
  })

  it("the narrowband decoder reads the low band: the 8 kHz audio, as close to the mu-law original as the pairs of a full decoding averaged", () => {
    const original = Int16Array.from(fixture("caller-appointment.ulaw"), mulawToLinear)
    const codes = fixture("g722/caller-appointment.g722")
    const narrow = new Int16Array(codes.length)
    const decoder = new G722NarrowbandDecoder()
    for (let at = 0; at < codes.length; at += G722_FRAME_BYTES) {
      const length = Math.min(G722_FRAME_BYTES, codes.length - at)
      expect(decoder.decode(codes.subarray(at, at + length), length, narrow, at)).toBe(length)
    }
    const full = decodeFrames(codes)
    const averaged = Int16Array.from({ length: codes.length }, (_, i) => (full[2 * i]! + full[2 * i + 1]!) >> 1)
    // Signal to noise against the original at the delay that suits each best (5 and 11 samples at 8 kHz).
    const snr = (decoded: Int16Array, delay: number) => {
      let signal = 0
      let noise = 0
      for (let i = 0; i + delay < original.length; i++) {
        signal += original[i]! ** 2
        noise += (original[i]! - decoded[i + delay]!) ** 2
      }
      return 10 * Math.log10(signal / noise)
    }
    expect(snr(narrow, 5)).toBeGreaterThan(12)
    expect(snr(narrow, 5)).toBeGreaterThan(snr(averaged, 11) - 1)
    const silence = new Int16Array(8000)
    new G722NarrowbandDecoder().decode(encodeFrames(new Int16Array(16000)), 8000, silence)
    expect(Math.max(...silence.map(Math.abs))).toBeLessThanOrEqual(8)
  })

  it("an odd sample count encodes the pairs and leaves the last sample out", () => {
    const out = new Uint8Array(4)
    expect(new G722Encoder().encode(Int16Array.of(1, 2, 3, 4, 5), 5, out)).toBe(2)
  })
})
