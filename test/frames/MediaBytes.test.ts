import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { mediaBytes, recordedMediaBytes } from "../../src/frames/MediaBytes.js"

/**
 * The observer's and the recorder's reads of a frame's bytes share one decoding (see
 * src/frames/MediaBytes.ts). Whatever the order of the reads, and however they interleave across
 * calls, each read answers exactly the bytes of the payload it was given.
 */

const payloadOf = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64")
/** A fresh string each time, never the same object as another read's (as frames read off a socket are). */
const copy = (payload: string) => (" " + payload).slice(1)

describe("MediaBytes", () => {
  it("answers each read with its own payload's bytes, whatever the order of observer and recorder reads", () => {
    const frame = fc.uint8Array({ minLength: 0, maxLength: 320 })
    const read = fc.record({ frame, recorder: fc.boolean(), sameObject: fc.boolean() })
    fc.assert(
      fc.property(fc.array(read, { minLength: 1, maxLength: 40 }), (reads) => {
        let previous = ""
        for (const { frame: bytes, recorder, sameObject } of reads) {
          // Often the very string the previous read had (the second reader of one frame), else a new one.
          const payload = sameObject && previous !== "" ? previous : copy(payloadOf(bytes))
          const answer = recorder ? recordedMediaBytes(payload) : mediaBytes(payload)
          expect(Buffer.from(answer).equals(Buffer.from(payload, "base64"))).toBe(true)
          previous = payload
        }
      }),
      { numRuns: 2000 }
    )
  })

  it("a recorded caller frame: the recorder decodes, the observer reads the same bytes", () => {
    const caller = payloadOf(Uint8Array.from({ length: 160 }, (_, i) => i))
    const recorded = Buffer.from(recordedMediaBytes(caller))
    expect(mediaBytes(caller)).toEqual(recorded)
    // The recorder's read between them (an agent frame played to make room) does not confuse the observer's.
    const agent = payloadOf(Uint8Array.from({ length: 160 }, (_, i) => 255 - i))
    recordedMediaBytes(caller)
    expect(Buffer.from(recordedMediaBytes(agent))).toEqual(Buffer.from(agent, "base64"))
    expect(Buffer.from(mediaBytes(caller))).toEqual(recorded)
  })
})
