import { Readable } from "node:stream"
import { describe, expect, it } from "vitest"
import { type JoinablePart, joinParts, type Piece, streamJoined } from "../../src/recording/RecordingJoin.js"
import { HEADER_BYTES, parseWav, wavHeader } from "../../src/recording/Wav.js"

/**
 * Joining a moved call's parts (docs/recording.md, "A call that moves"): where each part goes on
 * the whole's timeline, what is silence, how pauses move, and the bytes streamed for any range.
 */
const SECOND = 8000 * 4

const part = (startedAtMs: number, seconds: number, extra: Partial<JoinablePart> = {}): JoinablePart => ({
  startedAtMs,
  callerEndMs: seconds * 1000,
  dataBytes: seconds * SECOND,
  sampleRate: 8000,
  pauses: [],
  ...extra
})

/** A part's file whose every sample frame holds the part's number (caller) and its frame index (agent). */
const fileOf = (number: number, dataBytes: number) => {
  const file = Buffer.concat([wavHeader(dataBytes), Buffer.alloc(dataBytes)])
  for (let frame = 0; frame < dataBytes / 4; frame++) {
    file.writeInt16LE(number, HEADER_BYTES + frame * 4)
    file.writeInt16LE(frame % 30000, HEADER_BYTES + frame * 4 + 2)
  }
  return file
}

const collect = async (stream: Readable) => {
  const chunks: Array<Buffer> = []
  for await (const chunk of stream) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

describe("joining a recording's parts", () => {
  it("one part is the file as it is", () => {
    const joined = joinParts([part(1_000, 3, { pauses: [{ startMs: 500, endMs: 900 }] })])
    expect(joined.pieces).toEqual<Array<Piece>>([{ kind: "part", part: 0, from: HEADER_BYTES, bytes: 3 * SECOND }])
    expect(joined).toMatchObject({ sampleRate: 8000, dataBytes: 3 * SECOND, durationMs: 3000, pauses: [{ startMs: 500, endMs: 900 }], skipped: [] })
  })

  it("each part at the moment its stream began, silence between, pauses moved with their part (given in any order)", () => {
    const joined = joinParts([
      part(12_500, 2, { pauses: [{ startMs: 200, endMs: 700 }] }),
      part(10_000, 2, { pauses: [{ startMs: 1_500, endMs: null }] })
    ])
    expect(joined.pieces).toEqual<Array<Piece>>([
      { kind: "part", part: 1, from: HEADER_BYTES, bytes: 2 * SECOND },
      { kind: "silence", bytes: SECOND / 2 },
      { kind: "part", part: 0, from: HEADER_BYTES, bytes: 2 * SECOND }
    ])
    expect(joined.durationMs).toBe(4500)
    expect(joined.pauses).toEqual([
      { startMs: 1_500, endMs: 2_000 },
      { startMs: 2_700, endMs: 3_200 }
    ])
  })

  it("a pause that lasts to the end of a part and goes on from the start of the next is one pause, across the gap", () => {
    const joined = joinParts([part(0, 2, { pauses: [{ startMs: 1_500, endMs: 2_000 }] }), part(3_000, 2, { pauses: [{ startMs: 0, endMs: 400 }, { startMs: 1_000, endMs: 1_200 }] })])
    expect(joined.pauses).toEqual([
      { startMs: 1_500, endMs: 3_400 },
      { startMs: 4_000, endMs: 4_200 }
    ])
  })

  it("a clock behind never cuts the caller's audio: the later part starts where the caller's audio of the earlier ends, and cuts its agent's unplayed tail", () => {
    // The first part's caller audio ends at 2 s; its file runs to 3 s (agent audio queued, never played).
    const joined = joinParts([part(0, 3, { callerEndMs: 2_000 }), part(1_500, 1)])
    expect(joined.pieces).toEqual<Array<Piece>>([
      { kind: "part", part: 0, from: HEADER_BYTES, bytes: 2 * SECOND },
      { kind: "part", part: 1, from: HEADER_BYTES, bytes: SECOND }
    ])
    expect(joined.durationMs).toBe(3000)
  })

  it("a part a crash left (no caller end known) is kept whole", () => {
    const joined = joinParts([part(0, 2, { callerEndMs: undefined }), part(1_000, 1)])
    expect(joined.pieces.map((piece) => piece.bytes)).toEqual([2 * SECOND, SECOND])
  })

  it("a part at another rate than the first is left out", () => {
    const joined = joinParts([part(0, 1), part(2_000, 1, { sampleRate: 16000, dataBytes: 2 * SECOND })])
    expect(joined.skipped).toEqual([1])
    expect(joined.durationMs).toBe(1000)
  })

  it("any byte range of the joined file streams exactly those bytes of it", async () => {
    const parts = [part(0, 1), part(1_250, 1)]
    const files = parts.map((p, index) => fileOf(index + 1, p.dataBytes))
    const joined = joinParts(parts)
    const open = async (index: number, start: number, end: number) => Readable.from([files[index]!.subarray(start, end + 1)])
    const whole = await collect(streamJoined(joined, 0, HEADER_BYTES + joined.dataBytes - 1, open))
    expect(whole.length).toBe(HEADER_BYTES + joined.dataBytes)
    const { samples } = parseWav(whole)
    const caller = (frame: number) => samples[frame * 2]
    expect([caller(0), caller(7_999), caller(8_000), caller(9_999), caller(10_000), caller(17_999)]).toEqual([1, 1, 0, 0, 2, 2])
    expect(samples[10_000 * 2 + 1]).toBe(0)
    for (const [start, end] of [
      [0, 43],
      [10, 100],
      [44, 44],
      [HEADER_BYTES + SECOND - 3, HEADER_BYTES + SECOND + 5],
      [HEADER_BYTES + SECOND + 1000, HEADER_BYTES + 1.25 * SECOND + 17],
      [100, whole.length - 1]
    ] as const) {
      expect((await collect(streamJoined(joined, start, end, open))).equals(whole.subarray(start, end + 1)), `bytes ${start}-${end}`).toBe(true)
    }
  })
})
