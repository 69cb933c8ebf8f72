import { isAscii, isUtf8 } from "node:buffer"
import { Socket } from "node:net"
import { TLSSocket } from "node:tls"
import { Duplex } from "node:stream"
import type { WebSocket } from "ws"
import {
  FIN_PING,
  FIN_PONG,
  FIN_TEXT,
  LENGTH_BITS,
  LONG_LENGTH_MARKER,
  MASK_BIT,
  MASK_BYTES,
  MEDIUM_HEADER,
  MEDIUM_LENGTH,
  MEDIUM_LENGTH_MARKER
} from "./WsFraming.js"

/**
 * The receiving half of a WebSocket without extensions, read by callgate itself for the frames
 * that make up real traffic, and by `ws` for everything else (docs/design.md, "The path of a
 * media frame").
 *
 * `ws` reads a socket through a Writable stream (its Receiver): per frame a stream write, three
 * Buffer views (header, mask, payload), two event emissions and a Buffer handed to the listener
 * to decode. Nearly every frame of a call is one whole, masked text frame of a few hundred
 * bytes, so the reader takes the socket's `data` events itself and, for each frame that is
 *
 * - a whole text message (FIN set, no RSV bits, opcode 1), masked as its side requires (a
 *   server's peer masks, a client's does not: RFC 6455 5.1), with a 7- or 16-bit length within
 *   the receiver's `maxPayload`, and valid UTF-8: unmasks it in place if masked and hands the
 *   listener its text, decoded in one step (Latin-1 when it is all ASCII);
 * - a ping or pong with a short payload: hands it to `ws`'s own handlers (the automatic pong, the
 *   `pong` event), as `ws` would.
 *
 * Any other frame (a close, binary, a fragment, a 64-bit length, an oversized or wrongly masked frame,
 * invalid UTF-8, reserved bits) hands the socket back to `ws` for good, from that frame's first
 * byte: `ws`'s receiver has seen nothing before it, so it starts at a frame boundary and reacts
 * exactly as it always did (the close handshake, 1003, 1007, 1009, 1002). A frame split across
 * reads waits, as chunks, until its last byte has arrived; when the socket ends or closes, what
 * waits goes to `ws` too.
 *
 * A TCP socket's reads land in one buffer the reader owns (takeReads), not in a fresh allocation
 * per read: what is parsed from it is decoded to strings at once, and what must be kept (a frame
 * cut short, a ping, bytes for `ws`) is copied.
 *
 * The fields read are `ws` internals (pinned by package-lock.json): the reader takes over only
 * when they are as expected and the receiver has not yet been given a byte, and otherwise leaves
 * the socket to `ws`. test/websocket/WsFrameReader.test.ts feeds the same bytes, cut at random places,
 * to both, on either side, through a stream's push and through reads into the shared buffer, and
 * requires the same messages, replies and closes.
 */

/** The parts of `ws`'s receiver the reader relies on (ws/lib/receiver.js). */
interface WsReceiver {
  readonly _isServer: boolean
  readonly _maxPayload: number
  readonly _maxBufferedChunks?: number
  readonly _skipUTF8Validation: boolean
  readonly _allowSynchronousEvents: boolean
  readonly _bufferedBytes: number
  readonly _state: number
  readonly _fragments: ReadonlyArray<Buffer>
  readonly _extensions: object
  write(chunk: Buffer): boolean
  emit(event: "ping" | "pong", data: Buffer): boolean
}

interface WsInternals {
  readonly _isServer?: unknown
  readonly _receiver?: WsReceiver
  readonly _socket?: Duplex | null
}

/** The most bytes a frame read here can have: a 16-bit length (or maxPayload), a 4-byte header and the mask. */
const largestFrame = (maxPayload: number) => MEDIUM_HEADER + MASK_BYTES + (maxPayload > 0 ? Math.min(maxPayload, MEDIUM_LENGTH) : MEDIUM_LENGTH)

/** ws's Receiver state before a frame's first byte (GET_INFO in ws/lib/receiver.js). */
const RECEIVER_AT_FRAME_START = 0

/** The socket and receiver of a `ws` WebSocket the reader can take, with `ws`'s own data listener. */
const takeable = (ws: WebSocket) => {
  const internals = ws as unknown as WsInternals
  const receiver = internals._receiver
  const socket = internals._socket
  const isServer = internals._isServer
  if (typeof isServer !== "boolean" || ws.extensions !== "" || ws.readyState !== 1) return undefined
  if (receiver == null || socket == null || typeof socket.prependListener !== "function") return undefined
  if (receiver._isServer !== isServer || receiver._skipUTF8Validation !== false || receiver._allowSynchronousEvents !== true) return undefined
  if (Object.keys(receiver._extensions).length !== 0 || typeof receiver._maxPayload !== "number") return undefined
  // ws refuses a frame that arrives in more than maxBufferedChunks reads (1008); a frame read
  // here has at most largestFrame bytes, so it never comes in that many reads.
  const maxChunks = receiver._maxBufferedChunks ?? 0
  if (maxChunks !== 0 && maxChunks <= largestFrame(receiver._maxPayload)) return undefined
  if (receiver._bufferedBytes !== 0 || receiver._state !== RECEIVER_AT_FRAME_START || receiver._fragments.length !== 0) return undefined
  if (ws.listenerCount("message") !== 1) return undefined
  const wsOnData = socket.listeners("data").find((listener) => listener.name === "socketOnData")
  if (wsOnData === undefined || socket.listenerCount("data") !== 1) return undefined
  return { socket, receiver, masked: isServer, wsOnData: wsOnData as (chunk: Buffer) => void }
}

/**
 * Reads `ws`'s frames itself where it can (see above), handing each text message to `onText`
 * instead of `ws`'s `message` event, which must have exactly one listener (the adapter's, which
 * stays for what `ws` reads after a hand-over). Returns whether it took the socket.
 */
export const readFramesOf = (ws: WebSocket, onText: (text: string) => void): boolean => {
  const parts = takeable(ws)
  if (parts === undefined) return false
  new FrameReader(parts.socket, parts.receiver, parts.masked, parts.wsOnData, onText)
  return true
}

class FrameReader {
  /** A frame's first bytes, when it has not wholly arrived: chunks, joined once it has. */
  private waiting: Array<Buffer> | undefined = undefined
  private waitingBytes = 0
  /** Bytes the waiting frame needs before the next attempt can get further. */
  private needed = 0
  private readonly maxPayload: number

  constructor(
    private readonly socket: Duplex,
    private readonly receiver: WsReceiver,
    /** Whether the peer's frames are masked: a server's peer masks, a client's does not. */
    private readonly masked: boolean,
    private readonly wsOnData: (chunk: Buffer) => void,
    private readonly onText: (text: string) => void
  ) {
    this.maxPayload = receiver._maxPayload
    socket.removeListener("data", wsOnData)
    socket.on("data", this.onData)
    // Before ws's own listeners: what waits here reaches its receiver before it ends.
    socket.prependListener("end", this.onEnd)
    socket.prependListener("close", this.onEnd)
    this.pushesTaken = takePushes(socket, this.onData)
    if (this.pushesTaken) takeReads(socket, this.onData, this.onSharedRead)
  }

  /** Whether the socket's reads come to onData straight from its push (see takePushes). */
  private readonly pushesTaken: boolean

  /** Removed at a hand-over, so it runs only while the reader still has the socket. */
  private readonly onEnd = (): void => this.handOver(this.takeWaiting(), 0)

  private takeWaiting(): Buffer {
    const waiting = this.waiting
    this.waiting = undefined
    this.waitingBytes = 0
    if (waiting === undefined) return EMPTY
    return waiting.length === 1 ? waiting[0]! : Buffer.concat(waiting)
  }

  private readonly onData = (chunk: Buffer): void => {
    let buffer = chunk
    if (this.waiting !== undefined) {
      this.waiting.push(chunk)
      this.waitingBytes += chunk.length
      if (this.waitingBytes < this.needed) return
      buffer = this.takeWaiting()
    }
    this.read(buffer, buffer.length)
  }

  /**
   * A read the socket's handle made into the shared read buffer (see takeReads): its first
   * `length` bytes, valid until this returns. What must outlive it (a frame cut short, a ping's
   * payload, what goes to `ws`) is copied.
   */
  private readonly onSharedRead = (length: number): void => {
    if (this.waiting !== undefined) return this.onData(kept(sharedReads, 0, length))
    this.read(sharedReads, length)
  }

  /** Every whole frame of `buffer[0, end)`, in order; a frame cut short waits for the next read. */
  private read(buffer: Buffer, end: number): void {
    const maxPayload = this.maxPayload
    const masked = this.masked
    const maskBit = masked ? MASK_BIT : 0
    let at = 0
    while (at < end) {
      const available = end - at
      if (available < 2) return this.wait(buffer, at, end, 2)
      const first = buffer[at]!
      const second = buffer[at + 1]!
      if ((second & MASK_BIT) !== maskBit || (first !== FIN_TEXT && first !== FIN_PING && first !== FIN_PONG)) return this.handOver(buffer, at, end)
      let length = second & LENGTH_BITS
      let maskAt = at + 2
      if (length === MEDIUM_LENGTH_MARKER) {
        if (first !== FIN_TEXT) return this.handOver(buffer, at, end)
        if (available < MEDIUM_HEADER) return this.wait(buffer, at, end, MEDIUM_HEADER)
        length = (buffer[at + 2]! << 8) | buffer[at + 3]!
        maskAt = at + MEDIUM_HEADER
      } else if (length === LONG_LENGTH_MARKER) {
        return this.handOver(buffer, at, end)
      }
      if (maxPayload > 0 && length > maxPayload) return this.handOver(buffer, at, end)
      const start = masked ? maskAt + MASK_BYTES : maskAt
      const frameEnd = start + length
      if (frameEnd > end) return this.wait(buffer, at, end, frameEnd - at)
      const ascii = masked ? unmask(buffer, maskAt, start, frameEnd) : isAscii(buffer.subarray(start, frameEnd))
      if (first === FIN_TEXT) {
        if (ascii) this.onText(buffer.toString("latin1", start, frameEnd))
        else if (isUtf8(buffer.subarray(start, frameEnd))) this.onText(buffer.toString("utf8", start, frameEnd))
        else {
          // ws refuses it (1007) from the bytes as they came: masked again.
          if (masked) unmask(buffer, maskAt, start, frameEnd)
          return this.handOver(buffer, at, end)
        }
      } else {
        // A ping or pong (a 7-bit length: at most 125 bytes), emitted on ws's receiver: its own
        // handlers answer a ping and report a pong.
        this.receiver.emit(first === FIN_PING ? "ping" : "pong", kept(buffer, start, frameEnd))
      }
      at = frameEnd
    }
  }

  private wait(buffer: Buffer, at: number, end: number, needed: number): void {
    this.waiting = [kept(buffer, at, end)]
    this.waitingBytes = end - at
    this.needed = needed
  }

  /** From `buffer[at]` (a frame's first byte) on, the socket is ws's, as if it had read it all along. */
  private handOver(buffer: Buffer, at: number, end = buffer.length): void {
    const socket = this.socket
    socket.removeListener("data", this.onData)
    socket.removeListener("end", this.onEnd)
    socket.removeListener("close", this.onEnd)
    if (this.pushesTaken) delete (socket as { push?: unknown }).push
    socket.on("data", this.wsOnData)
    if (at < end && !this.receiver.write(kept(buffer, at, end))) socket.pause()
  }
}

const EMPTY = Buffer.alloc(0)

/**
 * The buffer every socket the reader takes reads into (see takeReads): one per process, since a
 * read is handled whole before the next one is made. 64 KB, as Node asks libuv for per read.
 */
const SHARED_READ_BYTES = 64 * 1024
const sharedReads = Buffer.allocUnsafeSlow(SHARED_READ_BYTES)
const sharedWords = new Uint32Array(sharedReads.buffer, sharedReads.byteOffset, SHARED_READ_BYTES >>> 2)

/** `buffer[at, end)` as a Buffer that may be kept: a copy when it lies in the shared read buffer. */
const kept = (buffer: Buffer, at: number, end: number): Buffer =>
  buffer === sharedReads ? Buffer.from(buffer.subarray(at, end)) : at === 0 && end === buffer.length ? buffer : buffer.subarray(at, end)

/** What the direct push reads of a Readable (node:internal/streams/readable's state, and EventEmitter's listeners). */
interface ReadableView {
  readonly _events?: { readonly data?: unknown }
  readonly _readableState?: {
    readonly flowing: boolean | null
    readonly length: number
    readonly reading: boolean
    readonly sync: boolean
    readonly ended: boolean
    readonly destroyed: boolean
    readonly errored: unknown
    readonly objectMode: boolean
    readonly decoder: unknown
    dataEmitted: boolean
  }
}

/**
 * A socket hands each read to its stream with `push(buffer)` (Node's onStreamRead). A stream that
 * flows, holds nothing and is already reading (it asked its socket for more and was not told to
 * stop) emits the read as `data` at once, then queues a tick that asks for more, which changes
 * nothing: it is reading. For a socket whose one `data` listener is the reader, that is a detour
 * per read, so its `push` hands such a read to `onData` itself and leaves the stream's state as
 * the tick would have left it (reading, flowing, empty, data emitted). Any other read (paused by
 * `ws.pause()`, bytes held, not reading, inside a `_read`, the end, destroyed or errored, an
 * encoding set, another `data` listener) takes the stream's own `push` and arrives through `data`
 * as always, in order. Taken only from a byte-mode Readable with the state above and no own `push`.
 */
const takePushes = (socket: Duplex, onData: (chunk: Buffer) => void): boolean => {
  const view = socket as unknown as ReadableView
  const state = view._readableState
  if (state === undefined || Object.hasOwn(socket, "push") || typeof socket.push !== "function" || view._events === undefined) return false
  if (state.objectMode !== false || state.decoder !== null || typeof state.reading !== "boolean" || typeof state.sync !== "boolean") return false
  const streamPush = socket.push
  // One shape for every socket read here (see settleShape), fixed before `push` is added to it.
  settleShape(socket)
  socket.push = function push(chunk: unknown, encoding?: BufferEncoding): boolean {
    if (chunk instanceof Buffer && chunk.length > 0 && state.reading && !state.sync && flowsEmptyTo(view, onData)) {
      state.dataEmitted = true
      onData(chunk)
      return true
    }
    return streamPush.call(this, chunk, encoding)
  }
  return true
}

/**
 * Whether a read may go to the reader's `onData` without the stream: it flows, holds nothing, its
 * one `data` listener is the reader's, and it is not ended, destroyed, errored or decoding.
 */
const flowsEmptyTo = (view: ReadableView, onData: (chunk: Buffer) => void): boolean => {
  const state = view._readableState!
  return (
    view._events!.data === onData &&
    state.flowing === true &&
    state.length === 0 &&
    !state.ended &&
    !state.destroyed &&
    state.errored === null &&
    state.decoder === null
  )
}

/** The own-property symbols through which a net.Socket reads into a buffer of its owner's (Node's `onread` option). */
interface UserBufferSlots {
  readonly buffer: symbol
  readonly callback: symbol
  readonly generator: symbol
}

const userBufferSlots = (socket: object): UserBufferSlots | undefined => {
  const found = new Map<string | undefined, symbol>()
  for (const key of Object.getOwnPropertySymbols(socket)) found.set(key.description, key)
  const buffer = found.get("kBuffer")
  const callback = found.get("kBufferCb")
  const generator = found.get("kBufferGen")
  return buffer === undefined || callback === undefined || generator === undefined ? undefined : { buffer, callback, generator }
}

/** A TCP socket's handle, as far as reads into a given buffer go (StreamBase::UseUserBuffer). */
interface UserBufferHandle {
  readonly useUserBuffer?: (buffer: Uint8Array) => void
}

/**
 * Node gives each read of a socket a buffer of its own: libuv reads into a fresh 64 KB allocation,
 * which is shrunk to the bytes read and wrapped in an ArrayBuffer and a Buffer that the collector
 * later frees (an allocation, a reallocation, two objects and an external-memory release per read;
 * a call's sockets read a hundred times a second). A net.Socket made with the `onread` option reads
 * into a buffer its owner gives instead, and hands each read to a callback. An accepted socket
 * cannot be given the option, so the reader gives it the same two things (the socket's own
 * `onread` slots and its handle's `useUserBuffer`), with one buffer for every socket it reads
 * (`sharedReads`: each read is handled whole before the next is made). The slots are found by
 * name among the socket's own symbols and must hold what Node leaves there (null); a socket without
 * them (not a net.Socket, or a Node that changed them) keeps its push, a TLS socket too.
 *
 * Each read then comes to `onSharedRead` when the stream is in the state takePushes reads
 * straight from (flowing, empty, data listener the reader's); any other read is copied and pushed
 * to the stream as it would have been (false when the stream is full: Node then stops reading
 * until the stream asks again, or the socket resumes). After a hand-over to `ws`, every read
 * takes the copy.
 */
const takeReads = (socket: Duplex, onData: (chunk: Buffer) => void, onSharedRead: (length: number) => void): void => {
  // A TLS socket's reads are the decrypted stream's, not its handle's: left to its push.
  if (socket instanceof TLSSocket) return
  const handle = (socket as unknown as { readonly _handle?: UserBufferHandle | null })._handle
  if (handle == null || typeof handle.useUserBuffer !== "function") return
  const slots = userBufferSlots(socket)
  if (slots === undefined) return
  const fields = socket as unknown as Record<symbol, unknown>
  if (fields[slots.buffer] !== null || fields[slots.callback] !== null || fields[slots.generator] !== null) return
  const view = socket as unknown as ReadableView
  const state = view._readableState!
  fields[slots.buffer] = sharedReads
  fields[slots.callback] = (length: number): boolean => {
    if (flowsEmptyTo(view, onData)) {
      state.dataEmitted = true
      onSharedRead(length)
      return true
    }
    return socket.push(kept(sharedReads, 0, length))
  }
  // Paused, the socket reads on into its stream until the stream is full, as a socket without
  // `onread` does (net.Socket stops an `onread` socket's reads at once): `ws` after a hand-over
  // meets the socket it always had. Set on every socket taken, after `push`: one shape for all.
  socket.pause = streamPause
  handle.useUserBuffer(sharedReads)
}

const streamPause = Duplex.prototype.pause

/**
 * A net.Socket caches its peer's address in a property of its own the first time `remoteAddress`
 * is read. A route that reads it after the upgrade (a carrier stream's `request.ip`) added that
 * property after `push` above, a route that never reads it (an agent's) not at all: two hidden
 * classes for the sockets of one process, and the per-read and per-write property reads in Node's
 * stream code (onStreamRead, Socket._writeGeneric) and in DirectWrites went from one shape to
 * several (V8's --log-ic showed them monomorphic at f6a5883, megamorphic after). Read here, before
 * `push` is added, every socket the reader takes has the same properties in the same order.
 */
const settleShape = (socket: Duplex): void => {
  if (socket instanceof Socket) void socket.remoteAddress
}

/** The mask's 4 bytes as one 32-bit word in the host's byte order. */
const maskBytes = new Uint8Array(4)
const maskWord = new Uint32Array(maskBytes.buffer)

/**
 * XORs `buffer[start, end)` with the 4-byte mask at `maskAt`, in place (the same call masks
 * again), and tells whether every unmasked byte is ASCII. Where the payload starts on a 4-byte
 * boundary of its memory (a 16-bit length: header and mask are 8 bytes), whole words at a time.
 */
const unmask = (buffer: Buffer, maskAt: number, start: number, end: number): boolean => {
  const m0 = buffer[maskAt]!
  const m1 = buffer[maskAt + 1]!
  const m2 = buffer[maskAt + 2]!
  const m3 = buffer[maskAt + 3]!
  let seen = 0
  let i = start
  const words = (end - start) >>> 2
  if (words >= 8 && ((buffer.byteOffset + start) & 3) === 0) {
    maskBytes[0] = m0
    maskBytes[1] = m1
    maskBytes[2] = m2
    maskBytes[3] = m3
    const mask = maskWord[0]!
    // The shared read buffer has a word view of its own (its memory starts on a word boundary).
    const shared = buffer === sharedReads
    const view = shared ? sharedWords : new Uint32Array(buffer.buffer, buffer.byteOffset + start, words)
    const first = shared ? start >>> 2 : 0
    let seenWords = 0
    for (let w = first, last = first + words; w < last; w++) {
      const word = view[w]! ^ mask
      view[w] = word
      seenWords |= word
    }
    if ((seenWords & 0x80808080) !== 0) seen = 0x80
    i = start + (words << 2)
  } else {
    for (const whole = end - ((end - start) & 3); i < whole; i += 4) {
      const b0 = buffer[i]! ^ m0
      const b1 = buffer[i + 1]! ^ m1
      const b2 = buffer[i + 2]! ^ m2
      const b3 = buffer[i + 3]! ^ m3
      buffer[i] = b0
      buffer[i + 1] = b1
      buffer[i + 2] = b2
      buffer[i + 3] = b3
      seen |= b0 | b1 | b2 | b3
    }
  }
  if (i < end) {
    const b = buffer[i]! ^ m0
    buffer[i] = b
    seen |= b
  }
  if (i + 1 < end) {
    const b = buffer[i + 1]! ^ m1
    buffer[i + 1] = b
    seen |= b
  }
  if (i + 2 < end) {
    const b = buffer[i + 2]! ^ m2
    buffer[i + 2] = b
    seen |= b
  }
  return seen < 0x80
}
