import createFvad from "@echogarden/fvad-wasm"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { comfortNoise, loadAudio, readUlawFile, readWavFile, silence, speechLike } from "../../sim/AudioSource.js"
import { readStamp, STAMP_BYTES, writeStamp } from "../../sim/FrameStamp.js"
import { QUIET_POWER } from "../../src/turns/VoiceActivity.js"
import { decodeMulaw, encodeMulaw, FRAME_BYTES, framesOf, isVoicedFrame, linearToMulaw, MULAW_TO_LINEAR, mulawRms } from "../../sim/Mulaw.js"
import { AudioFormatError, makeWav } from "../../sim/Wav.js"

const fixture = (name: string) => `test/fixtures/audio/${name}.ulaw`

/** WebRTC VAD (the detector callgate itself uses) over every 20 ms frame. */
const vadFlags = async (audio: Buffer, mode = 2): Promise<Array<boolean>> => {
  const fvad = await createFvad()
  const instance = fvad._fvad_new()
  fvad._fvad_set_sample_rate(instance, 8000)
  fvad._fvad_set_mode(instance, mode)
  const pointer = fvad._malloc(FRAME_BYTES * 2)
  const flags = framesOf(audio).map((frame) => {
    fvad.HEAP16.set(decodeMulaw(frame), pointer >> 1)
    return fvad._fvad_process(instance, pointer, FRAME_BYTES) === 1
  })
  fvad._free(pointer)
  fvad._fvad_free(instance)
  return flags
}

describe("mu-law", () => {
  it("decodes and encodes G.711 reference values", () => {
    expect(MULAW_TO_LINEAR[0xff]).toBe(0)
    expect(MULAW_TO_LINEAR[0x7f]).toBe(0)
    expect(MULAW_TO_LINEAR[0x80]).toBe(32124)
    expect(MULAW_TO_LINEAR[0x00]).toBe(-32124)
    expect(linearToMulaw(0)).toBe(0xff)
    expect(linearToMulaw(32767)).toBe(0x80)
    expect(linearToMulaw(-32768)).toBe(0x00)
    // Every code but negative zero survives decode then encode.
    for (let byte = 0; byte < 256; byte++) {
      if (byte !== 0x7f) expect(linearToMulaw(MULAW_TO_LINEAR[byte]!)).toBe(byte)
    }
  })
})

describe("audio sources", () => {
  let dir: string
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "callgate-sim-audio-"))
  })
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  it("reads a raw mu-law file as whole 160-byte frames, padding the last with silence", () => {
    const audio = readUlawFile(fixture("caller-appointment")) // 45351 bytes
    expect(audio.length).toBe(284 * FRAME_BYTES)
    expect(audio.subarray(45351).equals(Buffer.alloc(284 * FRAME_BYTES - 45351, 0xff))).toBe(true)
    expect(framesOf(audio)).toHaveLength(284)
    expect(framesOf(audio)[283]!.subarray(0, 45351 - 283 * FRAME_BYTES).equals(audio.subarray(283 * FRAME_BYTES, 45351))).toBe(true)
  })

  it("reads mu-law and 8 kHz PCM WAV files to the same frames as the raw audio", () => {
    const raw = readUlawFile(fixture("agent-greeting"))
    writeFileSync(join(dir, "mulaw.wav"), makeWav({ format: "mulaw", sampleRate: 8000, data: raw }))
    expect(readWavFile(join(dir, "mulaw.wav")).equals(raw)).toBe(true)

    writeFileSync(join(dir, "pcm8.wav"), makeWav({ format: "pcm", sampleRate: 8000, data: decodeMulaw(raw) }))
    const fromPcm = readWavFile(join(dir, "pcm8.wav"))
    // Negative zero (0x7f) comes back as positive zero (0xff); every sample keeps its value.
    expect(Array.from(decodeMulaw(fromPcm))).toEqual(Array.from(decodeMulaw(raw)))
  })

  it("brings 16 kHz PCM down to 8 kHz", () => {
    const raw = readUlawFile(fixture("caller-account"))
    const pcm8 = decodeMulaw(raw)
    const pcm16 = new Int16Array(pcm8.length * 2)
    pcm8.forEach((sample, i) => pcm16.set([sample, sample], i * 2))
    writeFileSync(join(dir, "pcm16.wav"), makeWav({ format: "pcm", sampleRate: 16000, data: pcm16 }))
    const audio = loadAudio(join(dir, "pcm16.wav"))
    expect(audio.length).toBe(raw.length)
    expect(Array.from(decodeMulaw(audio))).toEqual(Array.from(pcm8))
  })

  it("refuses WAV files it cannot play, saying why", () => {
    const write = (name: string, bytes: Buffer) => (writeFileSync(join(dir, name), bytes), join(dir, name))
    const stereo = makeWav({ format: "pcm", sampleRate: 8000, data: new Int16Array(320) })
    stereo.writeUInt16LE(2, 22)
    expect(() => readWavFile(write("stereo.wav", stereo))).toThrow(/2 channels; use mono/)
    expect(() => readWavFile(write("cd.wav", makeWav({ format: "pcm", sampleRate: 44100, data: new Int16Array(10) })))).toThrow(/44100 Hz/)
    expect(() => readWavFile(write("mulaw16k.wav", makeWav({ format: "mulaw", sampleRate: 16000, data: new Uint8Array(10) })))).toThrow(
      /mu-law at 16000 Hz/
    )
    const float = makeWav({ format: "pcm", sampleRate: 8000, data: new Int16Array(10) })
    float.writeUInt16LE(3, 20)
    expect(() => readWavFile(write("float.wav", float))).toThrow(/format 3/)
    expect(() => readWavFile(write("text.wav", Buffer.from("hello world, not a wav")))).toThrow(AudioFormatError)
  })

  it("names audio on the command line", () => {
    expect(loadAudio("silence:300").equals(silence(300))).toBe(true)
    expect(loadAudio("silence")).toHaveLength(100 * FRAME_BYTES)
    expect(loadAudio("speech:1000")).toHaveLength(50 * FRAME_BYTES)
    expect(loadAudio(fixture("line-noise")).equals(readUlawFile(fixture("line-noise")))).toBe(true)
    expect(() => loadAudio("song.mp3")).toThrow(/cannot tell what audio/)
    expect(() => loadAudio("speech:soon")).toThrow(AudioFormatError)
  })

  it("generates speech-like audio that WebRTC VAD and the energy detector both take for speech", async () => {
    const speech = speechLike({ durationMs: 2000 })
    expect(speech).toHaveLength(100 * FRAME_BYTES)
    const flags = await vadFlags(speech)
    expect(flags.filter(Boolean).length).toBeGreaterThanOrEqual(85)
    const energetic = framesOf(speech).filter((frame) => isVoicedFrame(frame)).length
    expect(energetic).toBeGreaterThanOrEqual(50)
    // Deterministic for a seed, different across seeds.
    expect(speechLike({ durationMs: 500, seed: 4 }).equals(speechLike({ durationMs: 500, seed: 4 }))).toBe(true)
    expect(speechLike({ durationMs: 500, seed: 4 }).equals(speechLike({ durationMs: 500, seed: 5 }))).toBe(false)
    // Syllables rise and fall: the level is not flat across the utterance.
    const levels = framesOf(speech).map((frame) => mulawRms(frame))
    expect(Math.min(...levels.slice(5, 95))).toBeLessThan(Math.max(...levels) / 4)
    expect(speechLike({ durationMs: 400, trailingSilenceMs: 200 }).subarray(20 * FRAME_BYTES).equals(silence(200))).toBe(true)
  })

  it("silence and comfort noise are never speech", async () => {
    for (const audio of [silence(2000), comfortNoise(2000), readUlawFile(fixture("line-noise"))]) {
      expect(framesOf(audio).some((frame) => isVoicedFrame(frame))).toBe(false)
      // The VAD needs a few frames to learn the line; after that it hears nothing.
      expect((await vadFlags(audio, 2)).slice(10).some(Boolean)).toBe(false)
    }
    expect(encodeMulaw([0, 0]).equals(Buffer.from([0xff, 0xff]))).toBe(true)
  })
})

describe("frame stamps", () => {
  it("round-trip call id, sequence number and send time", () => {
    const frame = Buffer.alloc(FRAME_BYTES, 0xff)
    writeStamp(frame, 0xfffffffe, 123456, 2 ** 40 + 17)
    expect(readStamp(frame)).toEqual({ callId: 0xfffffffe, seq: 123456, sentUs: 2 ** 40 + 17 })
    expect(frame.subarray(STAMP_BYTES).equals(Buffer.alloc(FRAME_BYTES - STAMP_BYTES, 0xff))).toBe(true)
    const elsewhere = Buffer.alloc(FRAME_BYTES, 0xff)
    writeStamp(elsewhere, 1, 2, 3, 100)
    expect(readStamp(elsewhere, 100)).toEqual({ callId: 1, seq: 2, sentUs: 3 })
  })

  it("are not found in audio that carries none", () => {
    expect(readStamp(readUlawFile(fixture("caller-appointment")))).toBeUndefined()
    expect(readStamp(silence(20))).toBeUndefined()
    expect(readStamp(Buffer.alloc(10, 0xf0))).toBeUndefined()
  })

  it("keep a stamped silent frame silent for the energy detector and the VAD", async () => {
    const frames = Array.from({ length: 100 }, (_, i) => {
      const frame = Buffer.alloc(FRAME_BYTES, 0xff)
      writeStamp(frame, 0xffffffff - i * 7919, i * 104729)
      return frame
    })
    expect(frames.every((frame) => mulawRms(frame) < 60)).toBe(true)
    expect(frames.some((frame) => isVoicedFrame(frame))).toBe(false)
    // Under the VAD's energy gate (mean square under QUIET_POWER) whatever the stamp holds, so a
    // stamped pause is as quiet as a real line's: every nibble at its loudest code (15 and 7).
    for (const [callId, seq] of [
      [0xffffffff, 0xffffffff],
      [0x77777777, 0x77777777]
    ] as const) {
      const loudest = Buffer.alloc(FRAME_BYTES, 0xff)
      writeStamp(loudest, callId, seq, 2 ** 48 - 1)
      expect(readStamp(loudest)).toEqual({ callId, seq, sentUs: 2 ** 48 - 1 })
      expect(mulawRms(loudest) ** 2).toBeLessThan(QUIET_POWER)
    }
    expect(frames.every((frame) => mulawRms(frame) ** 2 < QUIET_POWER)).toBe(true)
    for (const mode of [0, 1, 2, 3]) expect((await vadFlags(Buffer.concat(frames), mode)).slice(10).some(Boolean)).toBe(false)
  })
})
