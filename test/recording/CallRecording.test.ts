import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { MULAW_TO_LINEAR } from "../../sim/Mulaw.js"
import { G722Decoder } from "../../src/audio/G722.js"
import { alawToLinear, G722_16K } from "../../src/kernel/AudioFormat.js"
import { CallRecording, type FlushedAudio, WINDOW_SAMPLES } from "../../src/recording/CallRecording.js"
import { FRAME_BYTES } from "../../src/recording/Wav.js"

/**
 * The per-call window on its own: frames in, flushes out, laid into one "file" (a sparse array of
 * samples by position) as the writer would. Every frame is distinct, so a frame in the wrong
 * place cannot pass for another.
 */
const frame = (owner: number, n: number, samples = 160) => {
  const bytes = Buffer.alloc(samples)
  for (let i = 0; i < samples; i++) bytes[i] = (owner * 31 + n * 7 + i) % 250
  return bytes.toString("base64")
}
const pcm = (payload: string) => Array.from(Buffer.from(payload, "base64"), (byte) => MULAW_TO_LINEAR[byte]!)

class File {
  readonly left = new Map<number, number>()
  readonly right = new Map<number, number>()
  writes = 0
  end = 0
  lay(out: FlushedAudio | undefined) {
    if (out === undefined) return
    this.writes++
    for (let i = 0; i < out.length / FRAME_BYTES; i++) {
      this.left.set(out.at + i, out.bytes.readInt16LE(i * FRAME_BYTES))
      this.right.set(out.at + i, out.bytes.readInt16LE(i * FRAME_BYTES + 2))
    }
    this.end = Math.max(this.end, out.at + out.length / FRAME_BYTES)
  }
  channel(which: "left" | "right", from: number, length: number) {
    return Array.from({ length }, (_, i) => this[which].get(from + i) ?? 0)
  }
}

const take = (bytes: number) => Buffer.alloc(bytes)

describe("CallRecording", () => {
  it("flushes what the carrier's clock has passed, once per flush, and keeps the agent's lead for later", () => {
    const recording = new CallRecording()
    const file = new File()
    const callerFrames = Array.from({ length: 200 }, (_, n) => frame(1, n))
    // 1 s of caller audio, then 2 s of agent audio at once (a text-to-speech burst), then 3 s more of caller audio.
    for (let n = 0; n < 50; n++) recording.caller(callerFrames[n]!, n * 20)
    const burst = Array.from({ length: 100 }, (_, n) => frame(2, n))
    for (const payload of burst) recording.agent(payload)
    for (let second = 1; second <= 3; second++) {
      file.lay(recording.flush(take))
      for (let n = second * 50; n < (second + 1) * 50; n++) recording.caller(callerFrames[n]!, n * 20)
    }
    file.lay(recording.flush(take, true))
    expect(file.writes).toBe(4)
    expect(file.end).toBe(200 * 160)
    for (let n = 0; n < 200; n++) expect(file.channel("left", n * 160, 160)).toEqual(pcm(callerFrames[n]!))
    // The burst plays from 1 s on, back to back, as the carrier plays it: through the window and beyond it.
    burst.forEach((payload, k) => expect(file.channel("right", 8000 + k * 160, 160), `agent frame ${k}`).toEqual(pcm(payload)))
    expect(file.channel("right", 0, 8000).every((s) => s === 0)).toBe(true)
    expect(file.channel("right", 8000 + 100 * 160, 8000).every((s) => s === 0)).toBe(true)
  })

  it("clear drops what the carrier had not played yet", () => {
    const recording = new CallRecording()
    const file = new File()
    for (let n = 0; n < 10; n++) recording.caller(frame(1, n), n * 20)
    for (let k = 0; k < 50; k++) recording.agent(frame(2, k))
    for (let n = 10; n < 20; n++) recording.caller(frame(1, n), n * 20)
    // 10 agent frames were played (the clock moved 200 ms); the other 40 are dropped.
    recording.clear()
    for (let n = 20; n < 30; n++) recording.caller(frame(1, n), n * 20)
    recording.agent(frame(3, 0))
    file.lay(recording.flush(take, true))
    for (let k = 0; k < 10; k++) expect(file.channel("right", 1600 + k * 160, 160)).toEqual(pcm(frame(2, k)))
    expect(file.channel("right", 3200, 1600).every((s) => s === 0)).toBe(true)
    expect(file.channel("right", 4800, 160)).toEqual(pcm(frame(3, 0)))
  })

  it("a leap in the carrier's timestamps is silence of at most 5 s; late frames are dropped, not misplaced", () => {
    const recording = new CallRecording()
    const file = new File()
    recording.caller(frame(1, 0), 0)
    file.lay(recording.flush(take))
    // 60 s later by the carrier's timestamps: kept 5 s after the previous frame.
    recording.caller(frame(1, 1), 60_000)
    recording.caller(frame(1, 2), 60_020)
    // A frame for audio already written.
    recording.caller(frame(1, 9), 0)
    file.lay(recording.flush(take, true))
    expect(recording.droppedFrames).toBe(1)
    expect(file.channel("left", 0, 160)).toEqual(pcm(frame(1, 0)))
    expect(file.channel("left", 160 + 40_000, 160)).toEqual(pcm(frame(1, 1)))
    expect(file.channel("left", 320 + 40_000, 160)).toEqual(pcm(frame(1, 2)))
    expect(file.end).toBe(480 + 40_000)
  })

  it("frames that leap past the window before a flush are settled early (one extra write at most per flush)", () => {
    const recording = new CallRecording()
    const file = new File()
    // 4 s of audio arriving before any flush: the window (2.5 s) moves on early once.
    for (let n = 0; n < 200; n++) recording.caller(frame(1, n), n * 20)
    file.lay(recording.flush(take, true))
    expect(WINDOW_SAMPLES).toBe(20_000)
    // Whatever did not fit after the one early settle was dropped and counted; the rest is in place.
    const kept = Array.from({ length: 200 }, (_, n) => n).filter((n) => file.channel("left", n * 160, 160).some((s) => s !== 0))
    expect(kept.length + recording.droppedFrames).toBe(200)
    for (const n of kept) expect(file.channel("left", n * 160, 160)).toEqual(pcm(frame(1, n)))
    expect(file.writes).toBe(1)
  })

  it("caller audio that outruns the window before a flush: the queued agent frames still play back to back from where they were", () => {
    const recording = new CallRecording()
    const file = new File()
    const frames = WINDOW_SAMPLES / 160
    // 2 s of caller audio, then 1 s of agent audio at once: half of it fits the window, half waits.
    for (let n = 0; n < 100; n++) recording.caller(frame(1, n), n * 20)
    const answer = Array.from({ length: 50 }, (_, k) => frame(2, k))
    for (const payload of answer) recording.agent(payload)
    // 1 s more of caller audio, no flush between (a burst from the carrier): it runs past the window's end.
    for (let n = 100; n < 150; n++) recording.caller(frame(1, n), n * 20)
    file.lay(recording.flush(take, true))
    expect(frames).toBeLessThan(150)
    expect(file.end).toBe(150 * 160)
    for (let n = 0; n < 150; n++) expect(file.channel("left", n * 160, 160), `caller frame ${n}`).toEqual(pcm(frame(1, n)))
    answer.forEach((payload, k) => expect(file.channel("right", 16000 + k * 160, 160), `agent frame ${k}`).toEqual(pcm(payload)))
  })

  it("paused stretches are silent on both channels and listed", () => {
    const recording = new CallRecording()
    const file = new File()
    for (let n = 0; n < 10; n++) recording.caller(frame(1, n), n * 20)
    recording.pause(true)
    recording.pause(true)
    for (let n = 10; n < 20; n++) {
      recording.caller(frame(1, n), n * 20)
      recording.agent(frame(2, n))
    }
    recording.pause(false)
    for (let n = 20; n < 30; n++) recording.caller(frame(1, n), n * 20)
    file.lay(recording.flush(take, true))
    expect(recording.pauses).toEqual([{ startMs: 200, endMs: 400 }])
    expect(file.channel("left", 1600, 1600).every((s) => s === 0)).toBe(true)
    // The agent's frames sent while paused play from 220 ms on, back to back: silent up to the resume at 400 ms.
    expect(file.channel("right", 0, 3200).every((s) => s === 0)).toBe(true)
    expect(file.channel("right", 3200, 160)).toEqual(pcm(frame(2, 19)))
    expect(file.channel("left", 3200, 160)).toEqual(pcm(frame(1, 20)))
  })

  it("L16 at 16 kHz: positions, pauses and silence at the call's rate; A-law silence is zero, its samples exact", () => {
    const recording = new CallRecording({ encoding: "audio/L16", sampleRate: 16000 })
    const file = new File()
    /** 20 ms of 16 kHz L16 (big-endian), distinct per frame, negative samples included. */
    const wide = (owner: number, n: number) => {
      const bytes = Buffer.alloc(640)
      for (let i = 0; i < 320; i++) bytes.writeInt16BE(((owner * 7919 + n * 131 + i * 97) % 60000) - 30000, i * 2)
      return bytes.toString("base64")
    }
    const samplesOf = (payload: string) => Array.from({ length: 320 }, (_, i) => Buffer.from(payload, "base64").readInt16BE(i * 2))
    // Chunks 1..10 (chunk 0 never sent), a pause over chunks 11..15 (220..320 ms by the clock), then the agent at the clock.
    for (let n = 1; n <= 10; n++) recording.caller(wide(1, n), n * 20)
    recording.pause(true)
    for (let n = 11; n <= 15; n++) recording.caller(wide(1, n), n * 20)
    recording.pause(false)
    recording.agent(wide(2, 0))
    for (let n = 16; n <= 20; n++) recording.caller(wide(1, n), n * 20)
    file.lay(recording.flush(take, true))
    expect(recording.pauses).toEqual([{ startMs: 220, endMs: 320 }])
    expect(file.end).toBe(21 * 320)
    expect(file.channel("left", 0, 320).every((s) => s === 0)).toBe(true)
    for (const n of [1, 5, 10, 16, 20]) expect(file.channel("left", n * 320, 320), `chunk ${n}`).toEqual(samplesOf(wide(1, n)))
    expect(file.channel("left", 11 * 320, 5 * 320).every((s) => s === 0)).toBe(true)
    expect(file.channel("right", 0, 16 * 320).every((s) => s === 0)).toBe(true)
    expect(file.channel("right", 16 * 320, 320)).toEqual(samplesOf(wide(2, 0)))

    const alaw = new CallRecording({ encoding: "audio/x-alaw", sampleRate: 8000 })
    const alawFile = new File()
    const every = Buffer.from(Array.from({ length: 256 }, (_, byte) => byte)).toString("base64")
    alaw.caller(every, 20)
    alawFile.lay(alaw.flush(take, true))
    // Nothing was sent for the first 20 ms, and nothing by the agent: zero, not A-law's quietest code (+-8).
    expect(alawFile.channel("left", 0, 160).every((s) => s === 0)).toBe(true)
    expect(alawFile.channel("right", 0, 160 + 256).every((s) => s === 0)).toBe(true)
    expect(alawFile.channel("left", 160, 256)).toEqual(Array.from({ length: 256 }, (_, byte) => alawToLinear(byte)))
  })

  it("G.722: each channel decoded by its own decoder, every frame in order, a late frame too (it is not recorded, but the stream goes on from it)", () => {
    const codes = new Uint8Array(readFileSync(new URL("../fixtures/audio/g722/caller-appointment.g722", import.meta.url)))
    const chunk = (n: number) => Buffer.from(codes.subarray(n * 160, (n + 1) * 160)).toString("base64")
    /** The 16 kHz samples of frames [0, count) of a stream starting at `first`, through one decoder. */
    const reference = (first: number, count: number) => {
      const decoder = new G722Decoder()
      const out = new Int16Array(count * 320)
      for (let n = 0; n < count; n++) decoder.decode(Buffer.from(chunk(first + n), "base64"), 160, out, n * 320)
      return Array.from(out)
    }
    const recording = new CallRecording(G722_16K)
    const file = new File()
    // Caller frames 1..10 at their times, flushed; frame 11 comes stamped before what was written (late: dropped), then 12..20.
    for (let n = 1; n <= 10; n++) recording.caller(chunk(n), n * 20)
    file.lay(recording.flush(take))
    recording.caller(chunk(11), 0)
    expect(recording.droppedFrames).toBe(1)
    // The agent's frames, from another part of the recording, on the other channel.
    for (let k = 0; k < 5; k++) recording.agent(chunk(100 + k))
    for (let n = 12; n <= 20; n++) recording.caller(chunk(n), n * 20)
    file.lay(recording.flush(take, true))
    expect(recording.sampleRate).toBe(16000)
    const caller = reference(1, 20)
    expect(file.channel("left", 320, 10 * 320)).toEqual(caller.slice(0, 10 * 320))
    // Frame 11 was decoded all the same: frames 12..20 are those of the whole stream.
    expect(file.channel("left", 12 * 320, 9 * 320)).toEqual(caller.slice(11 * 320))
    expect(file.channel("right", 11 * 320, 5 * 320)).toEqual(reference(100, 5))
  })
})
