import { endianness } from "node:os"
import { MAX_MEDIA_BYTES } from "../frames/MediaFields.js"
import { MULAW_SILENCE, MULAW_TO_PCM } from "../audio/Mulaw.js"
import { FRAME_BYTES, SAMPLE_RATE } from "./Wav.js"

/** A stretch the agent asked not to record, in ms from the start of the recording; `endMs` null while it lasts. */
export interface RecordingPause {
  readonly startMs: number
  endMs: number | null
}

/** Audio of the recording window, in sample frames (mu-law, both channels): 2.5 s, 40 KB per call. */
export const WINDOW_SAMPLES = (SAMPLE_RATE * 5) / 2
/** Agent frames waiting beyond the window (the carrier's playout buffer): 60 s of 20 ms frames at most. */
const MAX_QUEUED_AGENT_FRAMES = 3000
/** The longest frame recorded (1.25 s): a longer one would not fit the window beside the audio before it. */
export const MAX_FRAME_SAMPLES = WINDOW_SAMPLES / 2
/** The longest silence one jump of the carrier's timestamps inserts (longer jumps are shortened to it). */
const MAX_JUMP_SAMPLES = SAMPLE_RATE * 5

const LITTLE_ENDIAN = endianness() === "LE"

const CALLER = 0
const AGENT = 1

/**
 * Every recording decodes a frame's base64 into this one buffer before copying it into its window:
 * copies are synchronous, so no two calls use it at once.
 */
const scratch = Buffer.allocUnsafeSlow(MAX_MEDIA_BYTES)

/** Samples in a base64 mu-law payload, without decoding it. */
const samplesIn = (payload: string): number => {
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
 * (docs/recording.md, "What is recorded, and the format"). Per frame everything is synchronous and copies the payload
 * into a window allocated once per call (no Effect, no Promise, no system call, no allocation);
 * `flush` (once a second, from the recorder's shared ticker) turns what is settled into PCM for one
 * positional write.
 *
 * The clock: a caller frame is placed at its own timestamp (ms since the stream began), so a
 * stretch the carrier sent nothing for is silence; the carrier's clock is the end of the latest
 * caller frame. Agent audio is what the carrier was sent to play (the agent's frames, comfort noise
 * while no agent holds the call): it starts at the clock when the carrier's playout was idle and
 * follows the previous audio back to back otherwise, as the carrier plays it; `clear` drops what
 * was not played yet. Paused stretches (`pause`) are written as silence on both channels.
 */
export class CallRecording {
  /** Mu-law sample frames, interleaved caller/agent, for positions [base, base + WINDOW_SAMPLES) (ring). */
  private readonly window = Buffer.allocUnsafeSlow(WINDOW_SAMPLES * 2).fill(MULAW_SILENCE)
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

  // Per frame

  /** A caller frame: placed at `timestampMs` (or right after the previous one when it has none). */
  caller(payload: string, timestampMs: number): void {
    const length = scratch.write(payload, 0, "base64")
    if (length === 0) return
    if (length > MAX_FRAME_SAMPLES) {
      this.droppedFrames++
      return
    }
    let at = timestampMs >= 0 ? timestampMs * 8 + this.timestampShift : this.clock
    if (at > this.clock + MAX_JUMP_SAMPLES) {
      // The carrier's timestamps leapt: keep MAX_JUMP_SAMPLES of silence, and the rest of the stream in step after it.
      this.timestampShift -= at - (this.clock + MAX_JUMP_SAMPLES)
      at = this.clock + MAX_JUMP_SAMPLES
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
    if (at + length - from > this.base + WINDOW_SAMPLES && !this.makeRoom(at, at + length - from)) {
      this.droppedFrames++
      return
    }
    this.put(CALLER, at, from, length)
    if (at + length - from > this.clock) this.clock = at + length - from
    if (this.agentCursor < this.clock && this.agentQueueHead === this.agentQueue.length) this.agentCursor = this.clock
  }

  /** An agent frame as sent to the carrier to play. */
  agent(payload: string): void {
    const samples = samplesIn(payload)
    if (samples > MAX_FRAME_SAMPLES) {
      this.droppedFrames++
      return
    }
    if (this.agentQueueHead < this.agentQueue.length) return this.queueAgent(payload)
    if (this.agentCursor < this.clock) this.agentCursor = this.clock
    if (this.agentCursor + samples > this.base + WINDOW_SAMPLES) return this.queueAgent(payload)
    const length = scratch.write(payload, 0, "base64")
    this.put(AGENT, this.agentCursor, 0, length)
    this.agentCursor += length
  }

  /** The carrier was told to drop the audio it has not played: so is the recording's. */
  clear(): void {
    this.agentQueue.length = 0
    this.agentQueueHead = 0
    const end = Math.min(this.agentCursor, this.base + WINDOW_SAMPLES)
    for (let position = Math.max(this.clock, this.base); position < end; position++) {
      this.window[(position % WINDOW_SAMPLES) * 2 + AGENT] = MULAW_SILENCE
    }
    this.agentCursor = this.clock
  }

  /** The agent paused (true) or resumed (false) the recording; repeats change nothing. */
  pause(paused: boolean): void {
    if (paused === this.pausedNow) return
    this.pausedNow = paused
    const atMs = Math.round((this.clock / SAMPLE_RATE) * 1000)
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
        const out = this.settle(take, Math.max(this.clock, Math.min(this.agentCursor, this.base + WINDOW_SAMPLES)))
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

  /** The end of the audio so far, in samples (the recording's duration once final). */
  get end(): number {
    return Math.max(this.clock, this.agentCursor, this.base)
  }

  // Internals

  /** Copies `scratch[from, length)` into `channel` at `at`, around the ring. */
  private put(channel: number, at: number, from: number, length: number) {
    const window = this.window
    const start = at % WINDOW_SAMPLES
    // Up to the ring's end, then from its start: no wrap test per sample.
    const split = from + Math.min(length - from, WINDOW_SAMPLES - start)
    for (let i = from, index = start * 2 + channel; i < split; i++, index += 2) window[index] = scratch[i]!
    for (let i = split, index = channel; i < length; i++, index += 2) window[index] = scratch[i]!
  }

  /** PCM of [base, end) with the paused stretches silenced; the window is cleared behind it. */
  private settle(take: (bytes: number) => Buffer, end: number): FlushedAudio | undefined {
    const from = this.base
    if (end <= from) return undefined
    const samples = end - from
    const bytes = take(samples * FRAME_BYTES)
    const window = this.window
    const start = (from % WINDOW_SAMPLES) * 2
    const first = Math.min(samples, WINDOW_SAMPLES - (from % WINDOW_SAMPLES))
    if (LITTLE_ENDIAN && bytes.byteOffset % 2 === 0) {
      // Straight into 16-bit lanes: one table look-up per sample.
      const pcm = new Int16Array(bytes.buffer, bytes.byteOffset, samples * 2)
      for (let i = 0, index = start; i < first * 2; i++, index++) pcm[i] = MULAW_TO_PCM[window[index]!]!
      for (let i = first * 2, index = 0; i < samples * 2; i++, index++) pcm[i] = MULAW_TO_PCM[window[index]!]!
    } else {
      for (let i = 0; i < samples * 2; i++) {
        const index = i < first * 2 ? start + i : i - first * 2
        bytes.writeInt16LE(MULAW_TO_PCM[window[index]!]!, i * 2)
      }
    }
    window.fill(MULAW_SILENCE, start, start + first * 2)
    if (samples > first) window.fill(MULAW_SILENCE, 0, (samples - first) * 2)
    for (const pause of this.pauses) {
      const start = Math.max(from, Math.floor((pause.startMs * SAMPLE_RATE) / 1000))
      const stop = Math.min(end, pause.endMs === null ? end : Math.ceil((pause.endMs * SAMPLE_RATE) / 1000))
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
    const settledEnd = Math.max(this.clock, Math.min(this.agentCursor, this.base + WINDOW_SAMPLES))
    const out = this.settle((bytes) => Buffer.allocUnsafe(bytes), settledEnd)
    this.early = this.merge(this.early, out, (bytes) => Buffer.allocUnsafe(bytes))
    // The window starts again at the frame (the gap before it is never written), with room ahead.
    if (at > this.base) {
      this.base = at
      // Agent audio that would land before the new window is part of the gap.
      if (this.agentCursor < this.base) this.agentCursor = this.base
    }
    return needEnd <= this.base + WINDOW_SAMPLES
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
      if (this.agentCursor + samplesIn(payload) > this.base + WINDOW_SAMPLES) break
      queue[this.agentQueueHead++] = ""
      const length = scratch.write(payload, 0, "base64")
      this.put(AGENT, this.agentCursor, 0, length)
      this.agentCursor += length
    }
    if (this.agentQueueHead === queue.length) {
      queue.length = 0
      this.agentQueueHead = 0
    }
  }
}
