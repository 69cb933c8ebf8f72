/**
 * Stamps carried inside the audio itself, so the benchmark can measure relay delay end to end
 * without trusting the relay: the sender writes (call id, sequence number, send time) into the
 * first bytes of a 160-byte mu-law frame; the receiver reads them back and subtracts.
 *
 * Times are `process.hrtime` microseconds: CLOCK_MONOTONIC, which every process on one machine
 * shares, so a stamp written by a carrier process can be compared by an agent process.
 *
 * Each stamp nibble is stored as one of the sixteen quietest mu-law codes: 0xF8-0xFF (linear 56 down
 * to 0) for nibbles 0-7 and 0x78-0x7F (linear -56 up to 0) for 8-15, so a nibble of 0 (most of a
 * call id, the high digits of a sequence number) is a zero sample. A stamped silent frame stays
 * under -60 dBFS whatever the stamp says (mean square at most 32 x 56^2 / 160 = 627, under the
 * VAD's energy gate, src/turns/VoiceActivity.ts; RMS under 25), quiet as a real line in a pause:
 * stamping does not make the turn detector hear speech, nor keep its VAD running in the pauses.
 */
export const STAMP_BYTES = 32

const MAGIC = 0xca11
/** The sixteen codes: bits 3-6 set; bit 7 clear for the negative half; the low 3 bits are 7 - magnitude. */
const CODE_MARK = 0x78
const POSITIVE = 0x80
const nibbleCode = (nibble: number) => (nibble < 8 ? POSITIVE | CODE_MARK | (7 - nibble) : CODE_MARK | (15 - nibble))
const codeNibble = (code: number) => (code & POSITIVE ? 7 - (code & 7) : 15 - (code & 7))

export interface FrameStamp {
  callId: number
  seq: number
  sentUs: number
}

/** Microseconds of the shared monotonic clock. */
export const nowUs = (): number => Number(process.hrtime.bigint() / 1000n)

const writeNibbles = (frame: Uint8Array, offset: number, value: number, nibbles: number) => {
  let rest = value
  for (let i = nibbles - 1; i >= 0; i--) {
    frame[offset + i] = nibbleCode(rest % 16)
    rest = Math.floor(rest / 16)
  }
}

const readNibbles = (frame: Uint8Array, offset: number, nibbles: number): number => {
  let value = 0
  for (let i = 0; i < nibbles; i++) {
    const byte = frame[offset + i]!
    if ((byte & CODE_MARK) !== CODE_MARK) return -1
    value = value * 16 + codeNibble(byte)
  }
  return value
}

/**
 * Writes a stamp into `frame` at `offset` (the frame must have STAMP_BYTES from there). `callId`
 * and `seq` are unsigned 32-bit; `sentUs` is kept to 48 bits (8.9 years of uptime).
 */
export const writeStamp = (frame: Uint8Array, callId: number, seq: number, sentUs: number = nowUs(), offset = 0): void => {
  writeNibbles(frame, offset, MAGIC, 4)
  writeNibbles(frame, offset + 4, callId >>> 0, 8)
  writeNibbles(frame, offset + 12, seq >>> 0, 8)
  writeNibbles(frame, offset + 20, sentUs % 2 ** 48, 12)
}

/**
 * Reads a stamp into `into` (reused by hot loops: no allocation) and returns true, or returns
 * false when the frame carries no stamp.
 */
export const readStampInto = (frame: Uint8Array, into: FrameStamp, offset = 0): boolean => {
  if (frame.length < offset + STAMP_BYTES || readNibbles(frame, offset, 4) !== MAGIC) return false
  const callId = readNibbles(frame, offset + 4, 8)
  const seq = readNibbles(frame, offset + 12, 8)
  const sentUs = readNibbles(frame, offset + 20, 12)
  if (callId < 0 || seq < 0 || sentUs < 0) return false
  into.callId = callId
  into.seq = seq
  into.sentUs = sentUs
  return true
}

export const readStamp = (frame: Uint8Array, offset = 0): FrameStamp | undefined => {
  const stamp: FrameStamp = { callId: 0, seq: 0, sentUs: 0 }
  return readStampInto(frame, stamp, offset) ? stamp : undefined
}
