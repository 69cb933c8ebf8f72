import { MAX_MEDIA_BYTES } from "./MediaFields.js"

/**
 * One base64 decoding per media frame, however many readers it has. The turn observer (LiveCall)
 * reads every frame's bytes; the recorder (RecordingLeg) reads those of a recorded call, before the
 * observer for a caller frame, after it for an agent frame, within the same synchronous step. The
 * second read of the same payload gets the bytes the first decoded.
 *
 * The observer's read compares payloads only when the recorder has just decoded one: comparing two
 * different frames' payloads (equal in length, as a call's frames are) is a character-by-character
 * runtime call, which a call that is not recorded should not pay on every frame.
 */

/** The one buffer frames are decoded into: every reader copies what it keeps before the next frame is decoded. */
const decoded = Buffer.allocUnsafeSlow(MAX_MEDIA_BYTES)
/** The payload whose bytes `decoded` holds. */
let lastPayload = ""
let lastBytes: Buffer = decoded.subarray(0, 0)
/** The recorder decoded `lastPayload`: the observer's next read may be the same frame. */
let recorderDecoded = false

const decode = (payload: string): Buffer => {
  const length = decoded.write(payload, 0, "base64")
  if (length !== lastBytes.length) lastBytes = decoded.subarray(0, length)
  lastPayload = payload
  return lastBytes
}

/**
 * The bytes of a base64 media payload, for the turn observer, in a buffer shared by every call
 * and valid until the next read of either kind. No allocation unless the frame's size changes.
 */
export const mediaBytes = (payload: string): Buffer => {
  if (recorderDecoded) {
    recorderDecoded = false
    if (payload === lastPayload) return lastBytes
  }
  return decode(payload)
}

/**
 * The same, for the recorder: a payload equal to the last one decoded (the frame the observer just
 * read, or an equal one, which decodes to the same bytes anyway) is not decoded again.
 */
export const recordedMediaBytes = (payload: string): Buffer => {
  if (payload === lastPayload) return lastBytes
  recorderDecoded = true
  return decode(payload)
}
