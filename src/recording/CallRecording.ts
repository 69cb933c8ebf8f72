import { endianness } from "node:os"
import { G722Decoder } from "../audio/G722.js"
import { MULAW_SILENCE, MULAW_TO_PCM } from "../audio/Mulaw.js"
import { recordedMediaBytes } from "../frames/MediaBytes.js"
import { alawToLinear, type AudioFormat, MULAW_8K } from "../kernel/AudioFormat.js"
import { FRAME_BYTES, SAMPLE_RATE } from "./Wav.js"

/** A stretch the agent asked not to record, in ms from the start of the recording; `endMs` null while it lasts. */
export interface RecordingPause {
  readonly startMs: number
  endMs: number | null
}

/** The recording window's length: 2.5 s of audio (40 KB per call for mu-law at 8 kHz, 160 KB for L16 at 16 kHz). */
const WINDOW_MS = 2500
/** Sample frames of the window at 8 kHz. */
export const WINDOW_SAMPLES = (SAMPLE_RATE * WINDOW_MS) / 1000
/** Agent frames waiting beyond the window (the carrier's playout buffer): 60 s of 20 ms frames at most. */
const MAX_QUEUED_AGENT_FRAMES = 3000
/** The longest silence one jump of the carrier's timestamps inserts (longer jumps are shortened to it). */
const MAX_JUMP_MS = 5000
const LITTLE_ENDIAN = endianness() === "LE"

const CALLER = 0
const AGENT = 1

/**
 * How a format's bytes reach the window. Mu-law (Twilio, and most Telnyx calls) stays as its codes
 * (one byte a sample, 0xFF is silence: a frame is one copy) and is expanded to PCM through a table
 * at flush time, once a second for the whole batch. A-law has no code for zero (a window of A-law
 * codes could not tell silence from its quietest sample), and L16 is PCM already: both are decoded
 * as they arrive into a window of 16-bit samples, where silence is 0. G.722 (16 kHz, two samples a
 * byte) is decoded as it arrives too, by a decoder per channel made with the recording: each frame
 * whole and in order, into a buffer shared by every call, then placed as the others are.
 */
const MULAW = 0
const ALAW = 1
const L16 = 2
const G722 = 3
type Codec = typeof MULAW | typeof ALAW | typeof L16 | typeof G722

/** A decoded G.722 frame of each channel (caller, agent), shared by every call: the longest frame recorded fits. */
const G722_DECODED = [new Int16Array((16 * WINDOW_MS) / 2), new Int16Array((16 * WINDOW_MS) / 2)] as const

/** Each A-law code's 16-bit sample (ITU-T G.711). */
const ALAW_TO_PCM = Int16Array.from({ length: 256 }, (_, byte) => alawToLinear(byte))
/**
 * Each mu-law code's sample in the low and in the high half of a 32-bit lane: one sample frame of
 * the file (caller low, agent high, on a little-endian machine) is `LOW[caller] | HIGH[agent]`.
 */
const MULAW_LOW = Int32Array.from(MULAW_TO_PCM, (sample) => sample & 0xffff)
const MULAW_HIGH = Int32Array.from(MULAW_TO_PCM, (sample) => sample << 16)

const codecOf = (format: AudioFormat): Codec =>
  format.encoding === "audio/x-alaw" ? ALAW : format.encoding === "audio/L16" ? L16 : format.encoding === "audio/G722" ? G722 : MULAW

/** Bytes in a base64 payload, without decoding it. */
const bytesIn = (payload: string): number => {
  const length = payload.length
  if (length === 0) return 0
  const padding = payload.charCodeAt(length - 1) === 61 ? (payload.charCodeAt(length - 2) === 61 ? 2 : 1) : 0
  return ((length * 3) >> 2) - padding
}

/** What a flush hands to storage: PCM bytes to write at a sample position. */
export interface FlushedAudio {
  /** Sample frame where `bytes` go (the file offset is HEADER_BYTES + at * FRAME_BYTES). */
  readonly at: number
  readonly bytes: Buffer
  readonly length: number
}

/**
 * The audio of one recorded call, kept in step with the call on the carrier's clock
 * (docs/recording.md, "What is recorded, and the format"). Per frame everything is synchronous and copies the frame's
 * samples into a window allocated once per call (no Effect, no Promise, no system call, no
 * allocation); `flush` (once a second, from the recorder's shared ticker) turns what is settled
 * into PCM for one positional write. Positions are in samples at the call's rate (the carrier's:
 * 8 kHz, or 16 kHz for Telnyx's L16 at 16 kHz).
 *
 * The clock: a caller frame is placed at its own timestamp (ms since the stream began), so a
 * stretch the carrier sent nothing for is silence; the carrier's clock is the end of the latest
 * caller frame. Agent audio is what the carrier was sent to play (the agent's frames, comfort noise
 * while no agent holds the call): it starts at the clock when the carrier's playout was idle and
 * follows the previous audio back to back otherwise, as the carrier plays it; `clear` drops what
 * was not played yet. Paused stretches (`pause`) are written as silence on both channels.
 */
export class CallRecording {
  /** Samples per second of the call's audio, and of the file. */
  readonly sampleRate: number
  private readonly codec: Codec
  /** Samples per byte of the carrier's format, as a shift: 1 byte per sample (0), 2 (L16: -1), half a byte (G.722: 1). */
  private readonly widthShift: number
  /** G.722: each channel's decoder (caller, agent). */
  private readonly decoders: ReadonlyArray<G722Decoder>
  private readonly windowSamples: number
  /** The longest frame recorded (1.25 s): a longer one would not fit the window beside the audio before it. */
  private readonly maxFrameSamples: number
  private readonly maxJumpSamples: number
  private readonly samplesPerMs: number
  /** Mu-law calls: each channel's codes (caller, agent) for positions [base, base + windowSamples) (a ring). */
  private readonly codes: ReadonlyArray<Uint8Array>
  /** Other formats: each channel's 16-bit samples, as `codes`. */
  private readonly pcm: ReadonlyArray<Int16Array>
  /** First sample position not yet handed to storage. */
  private base = 0
  /** The carrier's clock: the end of the latest caller frame, in samples. */
  private clock = 0
  /** Where the next agent sample plays. */
  private agentCursor = 0
  private readonly agentQueue: Array<string> = []
  private agentQueueHead = 0
  private timestampShift = 0
  private jumpedAtFlush = -1
  private flushes = 0
  /** Flushed audio waiting for the writer because the window had to move on early (a jump in the timestamps). */
  private early: FlushedAudio | undefined
  private pausedNow = false
  readonly pauses: Array<RecordingPause> = []
  /** Frames (or parts) that arrived for audio already written, or past the playout queue: not recorded. */
  droppedFrames = 0
  /** Set by `pause`: the sidecar metadata must be written again. */
  metadataChanged = false
  /** performance.now() of the last flush: the ticker flushes each recording once a second. */
  lastFlushAt = performance.now()

  constructor(format: AudioFormat = MULAW_8K) {
    this.sampleRate = format.sampleRate
    this.codec = codecOf(format)
    this.widthShift = this.codec === L16 ? -1 : this.codec === G722 ? 1 : 0
    this.decoders = this.codec === G722 ? [new G722Decoder(), new G722Decoder()] : []
    this.samplesPerMs = this.sampleRate / 1000
    this.windowSamples = this.samplesPerMs * WINDOW_MS
    this.maxFrameSamples = this.windowSamples / 2
    this.maxJumpSamples = this.samplesPerMs * MAX_JUMP_MS
    const mulaw = this.codec === MULAW
    this.codes = [new Uint8Array(mulaw ? this.windowSamples : 0).fill(MULAW_SILENCE), new Uint8Array(mulaw ? this.windowSamples : 0).fill(MULAW_SILENCE)]
    this.pcm = [new Int16Array(mulaw ? 0 : this.windowSamples), new Int16Array(mulaw ? 0 : this.windowSamples)]
  }

  // Per frame

  /** A caller frame: placed at `timestampMs` (or right after the previous one when it has none). */
  caller(payload: string, timestampMs: number): void {
    let bytes = recordedMediaBytes(payload)
    const length = this.samplesOf(bytes.length)
    if (length === 0) return
    if (length > this.maxFrameSamples) {
      this.droppedFrames++
      return
    }
    // G.722's decoder must see every frame, whether or not it is recorded: decoded here, once.
    if (this.codec === G722) this.decoders[CALLER]!.decode(bytes, bytes.length, G722_DECODED[CALLER])
    let at = timestampMs >= 0 ? timestampMs * this.samplesPerMs + this.timestampShift : this.clock
    if (at > this.clock + this.maxJumpSamples) {
      // The carrier's timestamps leapt: keep maxJumpSamples of silence, and the rest of the stream in step after it.
      this.timestampShift -= at - (this.clock + this.maxJumpSamples)
      at = this.clock + this.maxJumpSamples
    }
    let from = 0
    if (at < this.base) {
      // Late: the part before `base` was written already.
      from = this.base - at
      if (from >= length) {
        this.droppedFrames++
        return
      }
      at = this.base
    }
    if (at + length - from > this.base + this.windowSamples) {
      if (!this.makeRoom(at, at + length - from)) {
        this.droppedFrames++
        return
      }
      // makeRoom may have played queued agent frames, decoding them into the buffer `bytes` shares (recordedMediaBytes).
      bytes = recordedMediaBytes(payload)
    }
    this.put(CALLER, bytes, at, from, length)
    if (at + length - from > this.clock) this.clock = at + length - from
    if (this.agentCursor < this.clock && this.agentQueueHead === this.agentQueue.length) this.agentCursor = this.clock
  }

  /** An agent frame as sent to the carrier to play. */
  agent(payload: string): void {
    const samples = this.samplesIn(payload)
    if (samples > this.maxFrameSamples) {
      this.droppedFrames++
      return
    }
    if (this.agentQueueHead < this.agentQueue.length) return this.queueAgent(payload)
    if (this.agentCursor < this.clock) this.agentCursor = this.clock
    if (this.agentCursor + samples > this.base + this.windowSamples) return this.queueAgent(payload)
    this.putAgent(payload)
  }

  /** The carrier was told to drop the audio it has not played: so is the recording's. */
  clear(): void {
    this.agentQueue.length = 0
    this.agentQueueHead = 0
    const end = Math.min(this.agentCursor, this.base + this.windowSamples)
    const window = this.codec === MULAW ? this.codes[AGENT]! : this.pcm[AGENT]!
    const silence = this.codec === MULAW ? MULAW_SILENCE : 0
    for (let position = Math.max(this.clock, this.base); position < end; position++) window[position % this.windowSamples] = silence
    this.agentCursor = this.clock
  }

  /** The agent paused (true) or resumed (false) the recording; repeats change nothing. */
  pause(paused: boolean): void {
    if (paused === this.pausedNow) return
    this.pausedNow = paused
    const atMs = Math.round(this.clock / this.samplesPerMs)
    if (paused) this.pauses.push({ startMs: atMs, endMs: null })
    else this.pauses[this.pauses.length - 1]!.endMs = atMs
    this.metadataChanged = true
  }

  get paused(): boolean {
    return this.pausedNow
  }

  // Once a second

  /**
   * What is settled (up to the carrier's clock; `final`: everything, the agent's queue included) as
   * PCM for one write, into `take(bytes)`'s buffer; undefined when nothing is. The window moves on.
   */
  flush(take: (bytes: number) => Buffer, final = false): FlushedAudio | undefined {
    this.flushes++
    this.lastFlushAt = performance.now()
    if (final) {
      while (this.agentQueueHead < this.agentQueue.length) {
        const out = this.settle(take, Math.max(this.clock, Math.min(this.agentCursor, this.base + this.windowSamples)))
        this.early = this.merge(this.early, out, take)
        this.drainAgentQueue()
      }
    }
    const end = final ? Math.max(this.clock, this.agentCursor) : this.clock
    const early = this.early
    this.early = undefined
    const out = this.settle(take, end)
    this.drainAgentQueue()
    return this.merge(early, out, take)
  }

  /** Where the caller's audio ends (the carrier's clock), in samples. */
  get callerEnd(): number {
    return this.clock
  }

  /** The end of the audio so far, in samples (the recording's duration once final). */
  get end(): number {
    return Math.max(this.clock, this.agentCursor, this.base)
  }

  // Internals

  private samplesOf(bytes: number): number {
    return this.widthShift >= 0 ? bytes << this.widthShift : bytes >> 1
  }

  private samplesIn(payload: string): number {
    return this.samplesOf(bytesIn(payload))
  }

  /** An agent frame at the agent's cursor (which the caller made sure it fits after). */
  private putAgent(payload: string) {
    const bytes = recordedMediaBytes(payload)
    const samples = this.samplesOf(bytes.length)
    if (this.codec === G722) this.decoders[AGENT]!.decode(bytes, bytes.length, G722_DECODED[AGENT])
    this.put(AGENT, bytes, this.agentCursor, 0, samples)
    this.agentCursor += samples
  }

  /** Samples [from, length) of a decoded frame into `channel` at `at`, around the ring. */
  private put(channel: number, bytes: Buffer, at: number, from: number, length: number) {
    const start = at % this.windowSamples
    // Up to the ring's end, then from its start: no wrap test per sample.
    const split = from + Math.min(length - from, this.windowSamples - start)
    if (this.codec === MULAW) {
      const codes = this.codes[channel]!
      // The usual frame (whole, not across the ring's end): one copy.
      if (from === 0 && split === bytes.length) return codes.set(bytes, start)
      for (let i = from, index = start; i < split; i++, index++) codes[index] = bytes[i]!
      for (let i = split, index = 0; i < length; i++, index++) codes[index] = bytes[i]!
    } else if (this.codec === ALAW) {
      const pcm = this.pcm[channel]!
      for (let i = from, index = start; i < split; i++, index++) pcm[index] = ALAW_TO_PCM[bytes[i]!]!
      for (let i = split, index = 0; i < length; i++, index++) pcm[index] = ALAW_TO_PCM[bytes[i]!]!
    } else if (this.codec === G722) {
      // Decoded already (caller, putAgent), into the channel's shared buffer.
      const pcm = this.pcm[channel]!
      const decoded = G722_DECODED[channel as 0 | 1]
      for (let i = from, index = start; i < split; i++, index++) pcm[index] = decoded[i]!
      for (let i = split, index = 0; i < length; i++, index++) pcm[index] = decoded[i]!
    } else {
      // L16 is big-endian (as RTP carries it); an Int16Array lane wraps the 16 bits to a signed sample.
      const pcm = this.pcm[channel]!
      for (let i = from, index = start; i < split; i++, index++) pcm[index] = (bytes[2 * i]! << 8) | bytes[2 * i + 1]!
      for (let i = split, index = 0; i < length; i++, index++) pcm[index] = (bytes[2 * i]! << 8) | bytes[2 * i + 1]!
    }
  }

  /** PCM of [base, end) with the paused stretches silenced; the window is cleared behind it. */
  private settle(take: (bytes: number) => Buffer, end: number): FlushedAudio | undefined {
    const from = this.base
    if (end <= from) return undefined
    const samples = end - from
    const bytes = take(samples * FRAME_BYTES)
    const start = from % this.windowSamples
    const first = Math.min(samples, this.windowSamples - start)
    if (this.codec === MULAW) {
      const [caller, agent] = this.codes as [Uint8Array, Uint8Array]
      if (LITTLE_ENDIAN && bytes.byteOffset % 4 === 0) {
        // One 32-bit lane per sample frame: two table look-ups and one store.
        const lanes = new Int32Array(bytes.buffer, bytes.byteOffset, samples)
        for (let i = 0, j = start; i < first; i++, j++) lanes[i] = MULAW_LOW[caller[j]!]! | MULAW_HIGH[agent[j]!]!
        for (let i = first, j = 0; i < samples; i++, j++) lanes[i] = MULAW_LOW[caller[j]!]! | MULAW_HIGH[agent[j]!]!
      } else {
        for (let i = 0; i < samples; i++) {
          const j = i < first ? start + i : i - first
          bytes.writeInt16LE(MULAW_TO_PCM[caller[j]!]!, i * FRAME_BYTES)
          bytes.writeInt16LE(MULAW_TO_PCM[agent[j]!]!, i * FRAME_BYTES + 2)
        }
      }
      for (const codes of this.codes) {
        codes.fill(MULAW_SILENCE, start, start + first)
        if (samples > first) codes.fill(MULAW_SILENCE, 0, samples - first)
      }
    } else {
      const [caller, agent] = this.pcm as [Int16Array, Int16Array]
      if (LITTLE_ENDIAN && bytes.byteOffset % 4 === 0) {
        const lanes = new Int32Array(bytes.buffer, bytes.byteOffset, samples)
        for (let i = 0, j = start; i < first; i++, j++) lanes[i] = (caller[j]! & 0xffff) | (agent[j]! << 16)
        for (let i = first, j = 0; i < samples; i++, j++) lanes[i] = (caller[j]! & 0xffff) | (agent[j]! << 16)
      } else {
        for (let i = 0; i < samples; i++) {
          const j = i < first ? start + i : i - first
          bytes.writeInt16LE(caller[j]!, i * FRAME_BYTES)
          bytes.writeInt16LE(agent[j]!, i * FRAME_BYTES + 2)
        }
      }
      for (const pcm of this.pcm) {
        pcm.fill(0, start, start + first)
        if (samples > first) pcm.fill(0, 0, samples - first)
      }
    }
    for (const pause of this.pauses) {
      const start = Math.max(from, Math.floor(pause.startMs * this.samplesPerMs))
      const stop = Math.min(end, pause.endMs === null ? end : Math.ceil(pause.endMs * this.samplesPerMs))
      if (stop > start) bytes.fill(0, (start - from) * FRAME_BYTES, (stop - from) * FRAME_BYTES)
    }
    this.base = end
    if (this.agentCursor < end) this.agentCursor = Math.max(this.agentCursor, this.clock)
    return { at: from, bytes, length: samples * FRAME_BYTES }
  }

  /** Two consecutive pieces as one (one write); the first's buffer goes back to the caller's pool by being dropped. */
  private merge(first: FlushedAudio | undefined, second: FlushedAudio | undefined, take: (bytes: number) => Buffer) {
    if (first === undefined) return second
    if (second === undefined) return first
    const length = (second.at - first.at) * FRAME_BYTES + second.length
    const bytes = take(length)
    first.bytes.copy(bytes, 0, 0, first.length)
    bytes.fill(0, first.length, length - second.length)
    second.bytes.copy(bytes, length - second.length, 0, second.length)
    return { at: first.at, bytes, length }
  }

  /**
   * A caller frame lands beyond the window (the carrier's timestamps jumped ahead): the window's
   * audio is settled early, once per flush at most (so one write a second still holds); the gap
   * between is never written, and reads as silence.
   */
  private makeRoom(at: number, needEnd: number): boolean {
    if (this.jumpedAtFlush === this.flushes) return false
    this.jumpedAtFlush = this.flushes
    const settledEnd = Math.max(this.clock, Math.min(this.agentCursor, this.base + this.windowSamples))
    const out = this.settle((bytes) => Buffer.allocUnsafe(bytes), settledEnd)
    this.early = this.merge(this.early, out, (bytes) => Buffer.allocUnsafe(bytes))
    // The window starts again at the frame (the gap before it is never written), with room ahead.
    if (at > this.base) {
      this.base = at
      // Agent audio that would land before the new window is part of the gap.
      if (this.agentCursor < this.base) this.agentCursor = this.base
    }
    // Agent frames that waited for the window now fit: back to back from the cursor, before the
    // caller's clock passes it (the carrier plays them from there, not from where the clock gets to).
    this.drainAgentQueue()
    return needEnd <= this.base + this.windowSamples
  }

  private queueAgent(payload: string) {
    if (this.agentQueue.length - this.agentQueueHead >= MAX_QUEUED_AGENT_FRAMES) {
      this.droppedFrames++
      return
    }
    this.agentQueue.push(payload)
  }

  /** Agent frames that waited for the window to move on, played back to back. */
  private drainAgentQueue() {
    const queue = this.agentQueue
    while (this.agentQueueHead < queue.length) {
      if (this.agentCursor < this.clock) this.agentCursor = this.clock
      const payload = queue[this.agentQueueHead]!
      const samples = this.samplesIn(payload)
      if (this.agentCursor + samples > this.base + this.windowSamples) break
      queue[this.agentQueueHead++] = ""
      this.putAgent(payload)
    }
    if (this.agentQueueHead === queue.length) {
      queue.length = 0
      this.agentQueueHead = 0
    }
  }
}
