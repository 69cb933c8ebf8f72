/**
 * RFC 6455 section 5.2 framing, the little of it callgate writes and reads itself: the send side
 * (WsWireSocket.sendAscii) and the receive side (WsFrameReader). Everything else is `ws`'s.
 */

/** FIN with the text, ping or pong opcode and no reserved bits: the first byte of such a whole frame. */
export const FIN_TEXT = 0x81
export const FIN_PING = 0x89
export const FIN_PONG = 0x8a
/** The second byte: the mask flag and the 7-bit length (or one of the two markers below). */
export const MASK_BIT = 0x80
export const LENGTH_BITS = 0x7f
/** Payload lengths up to this fit the 7-bit length; up to MEDIUM_LENGTH, the 16-bit one after its marker. */
export const SHORT_LENGTH = 125
export const MEDIUM_LENGTH_MARKER = 126
export const MEDIUM_LENGTH = 0xffff
export const LONG_LENGTH_MARKER = 127
/** Bytes of a header up to the end of a 16-bit length. */
export const MEDIUM_HEADER = 4
export const MASK_BYTES = 4
