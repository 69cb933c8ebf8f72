import { Readable } from "node:stream"
import type { RecordingPause } from "./CallRecording.js"
import { durationMsOf, FRAME_BYTES, HEADER_BYTES, wavHeader } from "./Wav.js"

/**
 * Joining a call's parts into its one recording (docs/recording.md, "A call that moves"). A call
 * moved to another stream (an agent failover to another instance, a caller back from a transfer)
 * is recorded by each stream's instance as a part of its own; the whole is the parts laid on one
 * timeline, each at the moment its stream began, with silence where no part covers (the caller's
 * side of the move, as the caller heard it). Nothing is copied: the whole is a list of pieces (a
 * header, silences, byte ranges of the parts' files) that is streamed when the recording is read.
 */

/** What the join needs of a part: its sidecar's facts and its file's size and rate. */
export interface JoinablePart {
  /** When the part's stream began, epoch ms. */
  readonly startedAtMs: number
  /** Where the caller's audio of the part ends, ms from its start (unknown for parts a crash left). */
  readonly callerEndMs: number | undefined
  /** Bytes of the part's audio (its file less the header). */
  readonly dataBytes: number
  readonly sampleRate: number
  readonly pauses: ReadonlyArray<RecordingPause>
}

/** A stretch of the whole: silence, or bytes [from, from + bytes) of part `part`'s file. */
export type Piece =
  | { readonly kind: "silence"; readonly bytes: number }
  | { readonly kind: "part"; readonly part: number; readonly from: number; readonly bytes: number }

export interface JoinedRecording {
  readonly sampleRate: number
  /** Bytes of audio of the whole (the file is HEADER_BYTES more). */
  readonly dataBytes: number
  readonly durationMs: number
  /** Every part's pauses, on the whole's timeline. */
  readonly pauses: ReadonlyArray<{ readonly startMs: number; readonly endMs: number }>
  readonly pieces: ReadonlyArray<Piece>
  /** Parts left out: recorded at another rate than the first part's (a player reads one rate per file). */
  readonly skipped: ReadonlyArray<number>
}

/**
 * Lays the parts on one timeline, at the first part's rate. Each part starts where its stream began
 * (on its instance's clock), but never before the caller's audio of the part before it ends (clocks
 * of two machines disagree a little; the caller's audio is never cut for it). Where two parts
 * overlap (agent audio the earlier stream had queued but never played), the later one wins. A
 * pause that lasts to the end of a part and goes on from the start of the next (the call moved
 * while paused) is listed once, across the gap.
 */
export const joinParts = (parts: ReadonlyArray<JoinablePart>): JoinedRecording => {
  const order = parts.map((_, index) => index).sort((a, b) => parts[a]!.startedAtMs - parts[b]!.startedAtMs || a - b)
  const first = order[0] === undefined ? undefined : parts[order[0]]!
  const sampleRate = first?.sampleRate ?? 8000
  const framesPerMs = sampleRate / 1000
  const skipped = order.filter((index) => parts[index]!.sampleRate !== sampleRate)
  const used = order.filter((index) => parts[index]!.sampleRate === sampleRate)
  const framesOf = (index: number) => Math.floor(parts[index]!.dataBytes / FRAME_BYTES)
  const offsets: Array<number> = []
  used.forEach((index, k) => {
    if (k === 0) return offsets.push(0)
    const part = parts[index]!
    const previous = parts[used[k - 1]!]!
    const previousFrames = framesOf(used[k - 1]!)
    const previousCallerEnd = Math.min(previousFrames, Math.round((previous.callerEndMs ?? previousFrames / framesPerMs) * framesPerMs))
    const wall = Math.max(0, Math.round((part.startedAtMs - first!.startedAtMs) * framesPerMs))
    offsets.push(Math.max(wall, offsets[k - 1]! + previousCallerEnd))
  })
  const pieces: Array<Piece> = []
  const pauses: Array<{ startMs: number; endMs: number }> = []
  let cursor = 0
  /** The last pause listed lasted to the end of its part: a pause the next part starts with continues it (the move's gap included). */
  let openAtPartEnd = false
  used.forEach((index, k) => {
    const offset = offsets[k]!
    const frames = k + 1 < used.length ? Math.min(framesOf(index), offsets[k + 1]! - offset) : framesOf(index)
    if (offset > cursor) pieces.push({ kind: "silence", bytes: (offset - cursor) * FRAME_BYTES })
    if (frames > 0) pieces.push({ kind: "part", part: index, from: HEADER_BYTES, bytes: frames * FRAME_BYTES })
    cursor = offset + frames
    const shiftMs = offset / framesPerMs
    const lengthMs = frames / framesPerMs
    let continues = openAtPartEnd
    openAtPartEnd = false
    for (const pause of parts[index]!.pauses) {
      const startMs = Math.min(pause.startMs, lengthMs)
      const endMs = Math.min(pause.endMs ?? lengthMs, lengthMs)
      if (endMs < startMs || pause.startMs > lengthMs) continue
      if (continues && startMs === 0) pauses[pauses.length - 1]!.endMs = Math.round(shiftMs + endMs)
      else pauses.push({ startMs: Math.round(shiftMs + startMs), endMs: Math.round(shiftMs + endMs) })
      continues = false
      openAtPartEnd = endMs >= lengthMs - 1
    }
  })
  const dataBytes = cursor * FRAME_BYTES
  return { sampleRate, dataBytes, durationMs: durationMsOf(dataBytes, sampleRate), pauses, pieces, skipped }
}

/** Opens bytes [start, end] (inclusive) of part `part`'s file. */
export type OpenPart = (part: number, start: number, end: number) => Promise<NodeJS.ReadableStream>

const SILENCE = Buffer.alloc(64 * 1024)

/**
 * Bytes [start, end] (inclusive) of the joined file, streamed: the header, then each piece in turn
 * (silence from one shared zero buffer, parts read from their files or objects as they are needed).
 */
export const streamJoined = (joined: JoinedRecording, start: number, end: number, open: OpenPart): Readable => {
  const header = wavHeader(joined.dataBytes, joined.sampleRate)
  async function* bytes(): AsyncGenerator<Buffer> {
    const stop = end + 1
    if (start < HEADER_BYTES) yield header.subarray(start, Math.min(HEADER_BYTES, stop))
    let at = HEADER_BYTES
    for (const piece of joined.pieces) {
      const from = Math.max(start, at)
      const to = Math.min(stop, at + piece.bytes)
      if (to > from) {
        if (piece.kind === "silence") {
          for (let left = to - from; left > 0; left -= SILENCE.length) yield SILENCE.subarray(0, Math.min(left, SILENCE.length))
        } else {
          const stream = await open(piece.part, piece.from + (from - at), piece.from + (to - at) - 1)
          for await (const chunk of stream) yield Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string)
        }
      }
      at += piece.bytes
      if (at >= stop) break
    }
  }
  return Readable.from(bytes(), { objectMode: false })
}
