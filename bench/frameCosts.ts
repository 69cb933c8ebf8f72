/**
 * Per-frame costs of callgate's own work, in isolation (one process, no sockets): reading a
 * Twilio media frame through the scanner against JSON.parse and the guard (flat strings, as a
 * socket delivers them), and the VAD on audio, on a settled quiet line (the energy gate) and
 * reading the level only. Figures in the README's Performance section.
 *
 *   npx tsx bench/frameCosts.ts
 */
import { Effect } from "effect"
import { loadFvad, VoiceDetector } from "../src/turns/VoiceActivity.js"
import { parseJson } from "../src/frames/FrameDecoding.js"
import { isTwilioMediaFrame, twilioInboundEncoder, twilioMediaScanner } from "../src/frames/TwilioFrames.js"

const payload = Buffer.alloc(160, 0x55).toString("base64")
const encoder = twilioInboundEncoder("MZ0123456789abcdef")
const frames = Array.from({ length: 1000 }, (_, i) => Buffer.from(encoder.media(i, i, i * 20, payload)).toString())

const measure = (name: string, runs: number, once: (i: number) => unknown) => {
  let best = Infinity
  for (let round = 0; round < 5; round++) {
    const started = process.hrtime.bigint()
    for (let i = 0; i < runs; i++) once(i)
    best = Math.min(best, Number(process.hrtime.bigint() - started) / runs)
  }
  process.stdout.write(`${name}: ${best.toFixed(0)} ns per frame (best of 5 rounds of ${runs})\n`)
}

const scanner = twilioMediaScanner
measure("JSON.parse + media guard + payload", 300_000, (i) => {
  const raw = parseJson(frames[i % 1000]!)
  return isTwilioMediaFrame(raw) && raw.media.payload
})
measure("scanner + stream check + payload slice", 300_000, (i) => {
  const text = frames[i % 1000]!
  return scanner.scan(text) && scanner.result.isStream(text, "MZ0123456789abcdef") && scanner.result.payload(text)
})

const fvad = await Effect.runPromise(loadFvad)
const detector = new VoiceDetector(fvad, 3)
const audio = new Uint8Array(160).map((_, i) => (i * 37) & 0xff)
const silence = new Uint8Array(160).fill(0xff)
measure("VAD on audio", 200_000, () => detector.isVoiced(audio))
measure("VAD on a settled quiet line (energy gate)", 200_000, () => detector.isVoiced(silence))
measure("level only (measure)", 200_000, () => detector.measure(audio))
detector.close()
