/**
 * The little of a WebSocket that the call relay needs, so the relay and the dialect handlers
 * never touch `ws` or fastify (the adapter is WsWireSocket.ts). One socket has one listener at a
 * time; `listen` replaces it (a dial-in agent socket moves from the idle pool to a call).
 */
export interface WireListener {
  /** One text message. Binary messages never arrive here: the adapter refuses them. */
  onText(text: string): void
  /**
   * The socket is gone; called exactly once. `fault` is set when it ended through a transport
   * failure (reset, oversized or binary message, missed pong) rather than a close handshake.
   */
  onClose(code: number, reason: string, fault: string | undefined): void
}

export interface WireSocket {
  /** Sends one text message; does nothing once the socket is closing. */
  send(text: string): void
  /**
   * `send` for a text the caller knows holds only ASCII characters (the media frames: base64
   * payload, fixed parts checked once per stream), which the adapter may hand over as bytes
   * without UTF-8 encoding. Anything else must go through `send`.
   */
  sendAscii(text: string): void
  /** Starts the close handshake; idempotent. `reason` must stay under 123 bytes. */
  close(code: number, reason: string): void
  listen(listener: WireListener): void
  readonly isOpen: boolean
  /** Bytes queued but not yet written: grows when the peer stops reading. */
  readonly bufferedAmount: number
  /**
   * Liveness check: when the previous ping was answered, pings again and returns true; when it
   * was not, cuts the socket (its listener hears `onClose` with a fault) and returns false.
   */
  heartbeat(): boolean
}

/** WebSocket close codes callgate uses (RFC 6455 section 7.4.1), in one place. */
export const CloseCode = {
  normal: 1000,
  goingAway: 1001,
  protocolError: 1002,
  unsupportedData: 1003,
  invalidPayload: 1007,
  policyViolation: 1008,
  messageTooBig: 1009,
  internalError: 1011,
  tryAgainLater: 1013
} as const

/** Close reasons are limited to 123 bytes of UTF-8; longer ones would make `ws` throw. */
export const closeReason = (text: string): string => {
  if (Buffer.byteLength(text) <= 123) return text
  let cut = text.slice(0, 120)
  while (Buffer.byteLength(cut) > 120) cut = cut.slice(0, -1)
  return `${cut}...`
}
