import { MAX_MEDIA_BYTES } from "./MediaFields.js"

/**
 * One base64 decoding per media frame, however many readers it has. The turn observer (LiveCall)
 * and the recorder (RecordingLeg) both read a frame's bytes, one after the other within the same
 * synchronous step; the second read of the same payload gets the bytes the first decoded.
 */

/** The one buffer frames are decoded into: every reader copies what it keeps before the next frame is decoded. */
const decoded = Buffer.allocUnsafeSlow(MAX_MEDIA_BYTES)
let lastPayload = ""
let lastBytes: Buffer = decoded.subarray(0, 0)

/**
 * The bytes of a base64 media payload, in a buffer shared by every call and valid until the next
 * call of this function. A payload equal to the last one decoded is not decoded again (the same
 * string is one comparison; an equal one decodes to the same bytes anyway). No allocation unless
 * the frame's size changes.
 */
export const mediaBytes = (payload: string): Buffer => {
  if (payload === lastPayload) return lastBytes
  const length = decoded.write(payload, 0, "base64")
  if (length !== lastBytes.length) lastBytes = decoded.subarray(0, length)
  lastPayload = payload
  return lastBytes
}
