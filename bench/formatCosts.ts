/**
 * What each stream audio format (docs/calls.md, "Audio formats") adds to a call's per-frame work,
 * in isolation (one process, no sockets): the conversion the turn observer reads (8 kHz mu-law for
 * the VAD) per 20 ms frame, and with agentAudioFormat mu-law the transcoding of one frame each way
 * (base64 in, base64 out). mu-law is the baseline (nothing to do). Per call that is 50 frames a
 * second each way: the figure below in ns/frame x 100 is ns of CPU per second of call.
 * G.722 (a codec, not a table) is measured per frame for its encoder and decoder too; a recorded
 * G.722 call decodes both channels on top (2 x decode per frame pair).
 *
 *   npx tsx bench/formatCosts.ts
 */
import { G722Decoder, G722Encoder, G722NarrowbandDecoder } from "../src/audio/G722.js"
import { type AudioFormat, bytesPerMs, G722_16K, linearToAlaw, mulawToLinear, payloadTranscoders, toObservedMulaw } from "../src/kernel/AudioFormat.js"

const formats: ReadonlyArray<[string, AudioFormat]> = [
  ["mu-law 8 kHz", { encoding: "audio/x-mulaw", sampleRate: 8000 }],
  ["PCMA 8 kHz", { encoding: "audio/x-alaw", sampleRate: 8000 }],
  ["L16 8 kHz", { encoding: "audio/L16", sampleRate: 8000 }],
  ["L16 16 kHz", { encoding: "audio/L16", sampleRate: 16000 }],
  ["G.722 16 kHz", G722_16K]
]

const measure = (runs: number, once: (i: number) => unknown): number => {
  let best = Infinity
  for (let round = 0; round < 5; round++) {
    const started = process.hrtime.bigint()
    for (let i = 0; i < runs; i++) once(i)
    best = Math.min(best, Number(process.hrtime.bigint() - started) / runs)
  }
  return best
}

const mulaw = Uint8Array.from({ length: 160 }, (_, i) => (i * 37) & 0xff)
const frameIn = (format: AudioFormat): Uint8Array => {
  if (format.encoding === "audio/x-mulaw") return mulaw
  if (format.encoding === "audio/x-alaw") return Uint8Array.from(mulaw, (b) => linearToAlaw(mulawToLinear(b)))
  if (format.encoding === "audio/G722") {
    const codes = new Uint8Array(160)
    new G722Encoder().encode(Int16Array.from({ length: 320 }, (_, i) => mulawToLinear(mulaw[i >> 1]!)), 320, codes)
    return codes
  }
  const out = Buffer.alloc(bytesPerMs(format) * 20)
  const repeat = format.sampleRate / 8000
  mulaw.forEach((b, i) => {
    for (let r = 0; r < repeat; r++) out.writeInt16BE(mulawToLinear(b), (i * repeat + r) * 2)
  })
  return new Uint8Array(out)
}

for (const [name, format] of formats) {
  const frame = frameIn(format)
  const observe = toObservedMulaw(format)
  // G.722 is a codec, not a table: a hundred times the work, a fiftieth of the runs.
  const runs = format.encoding === "audio/G722" ? 1 / 50 : 1
  const observed = measure(500_000 * runs, () => observe(frame))
  const transcoders = payloadTranscoders(format, { encoding: "audio/x-mulaw", sampleRate: 8000 })
  const carrierPayload = Buffer.from(frame).toString("base64")
  const agentPayload = Buffer.from(mulaw).toString("base64")
  const both = transcoders === undefined ? 0 : measure(200_000 * runs, () => (transcoders.toAgent(carrierPayload), transcoders.toCarrier(agentPayload)))
  process.stdout.write(
    `${name.padEnd(13)} observer conversion ${observed.toFixed(0).padStart(5)} ns/frame; ` +
      `mu-law agent transcoding (both ways) ${both.toFixed(0).padStart(5)} ns/frame pair = ${((observed * 2 + both) * 50 / 1000).toFixed(1)} us CPU per second of call\n`
  )
}

{
  // The G.722 codec alone, per 20 ms frame (320 samples, 160 bytes).
  const pcm = Int16Array.from({ length: 320 }, (_, i) => mulawToLinear(mulaw[i >> 1]!))
  const codes = new Uint8Array(160)
  const encoder = new G722Encoder()
  const decoder = new G722Decoder()
  const narrowband = new G722NarrowbandDecoder()
  const encode = measure(10_000, () => encoder.encode(pcm, 320, codes))
  const decode = measure(10_000, () => decoder.decode(codes, 160, pcm))
  const decodeLowBand = measure(10_000, () => narrowband.decode(codes, 160, pcm))
  process.stdout.write(
    `G.722 codec   encode ${encode.toFixed(0).padStart(5)} ns/frame; decode ${decode.toFixed(0).padStart(5)} ns/frame (a recorded call: two per frame pair); ` +
      `low band only (8 kHz) ${decodeLowBand.toFixed(0).padStart(5)} ns/frame\n`
  )
}
