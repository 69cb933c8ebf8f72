import type { Duplex } from "node:stream"
import type { RawData, WebSocket } from "ws"
import { type GateLimit, MESSAGES_PER_TURN, type SocketGate, TurnClock } from "./SocketGate.js"
import { isAscii } from "../frames/MediaFields.js"
import { CloseCode, closeReason, type WireListener, type WireSocket } from "../frames/WireSocket.js"
import { DirectWrites } from "./DirectWrites.js"
import { readFramesOf } from "./WsFrameReader.js"
import { FIN_TEXT, MEDIUM_LENGTH, MEDIUM_LENGTH_MARKER, SHORT_LENGTH } from "./WsFraming.js"

const OPEN = 1
const CLOSED = 3

const idle: WireListener = { onText: () => {}, onClose: () => {} }

/** A peer that does not answer our close frame within this long is cut (ws itself waits 30 s). */
const CLOSE_GRACE_MS = 1000

/** A promise already settled: `then` on it queues a microtask without the bookkeeping of queueMicrotask. */
const settled = Promise.resolve()

/**
 * The event loop's turns, shared by every socket of the process (the per-turn message budget): a
 * turn ends with the callback that read the messages (a microtask), and what waits runs in a
 * later macrotask, after other sockets have been read.
 */
const turns = new TurnClock(
  (advance) => void settled.then(advance),
  (run) => void setImmediate(run)
)

/** A binary message waiting its turn (refused when its turn comes, in order). */
const BINARY = Symbol("binary")
type Deferred = string | typeof BINARY

/** `ws.send` options for a text message handed over as bytes (sendAscii). */
const TEXT_FRAME = { binary: false } as const

/**
 * The TCP socket under a server-side `ws` WebSocket on which no extension was negotiated, or
 * undefined. On such a socket a text message is a header of 2 or 4 bytes (no mask: RFC 6455 5.1
 * forbids masking from the server) and the payload, and `ws` writes every frame of its own
 * straight to this socket, in call order (its sender queues only while compressing, which needs
 * an extension). A client-side socket (frames must be masked) or one with an extension gets
 * undefined, and every message goes through `ws.send`. The fields read are `ws` internals, pinned
 * by package-lock.json and checked by test/websocket/WsWireSocket.test.ts against `ws`'s own framing.
 */
const unmaskedSocketOf = (ws: WebSocket): Duplex | undefined => {
  const internals = ws as unknown as { readonly _isServer?: unknown; readonly _socket?: unknown }
  const socket = internals._socket as Duplex | null | undefined
  if (internals._isServer !== true || ws.extensions !== "" || socket == null || typeof socket.write !== "function") return undefined
  return socket
}

/**
 * Adapts a `ws` WebSocket (server side from @fastify/websocket, or a dial-out client) to
 * WireSocket. Its listeners are attached here, synchronously, so a carrier's first frames are
 * never lost; a throwing listener is contained: the socket is closed with 1011 and nothing else
 * is disturbed. A `gate` (websocket/SocketGuards.ts) enforces the per-socket limits: a socket over its
 * message rate, idle or unauthenticated too long is closed with 1008, one whose peer stopped
 * reading is cut; its listener hears either as a fault.
 *
 * Fairness (docs/security.md, "Per-socket limits"): at most MESSAGES_PER_TURN messages of this
 * socket are handled per turn (one callback of the event loop: one read). The rest of a burst is
 * kept in order, the socket stops reading, and each following macrotask hands the listener the
 * next MESSAGES_PER_TURN (TurnClock.later), so other sockets' frames are read in between. At real
 * cadence no message ever waits; per frame it costs a comparison with one shared turn number (no
 * allocation, no timer), per read with messages one microtask.
 *
 * A class, not an object literal with getters: every socket of the process then shares one
 * hidden class, so the media path's calls into it stay monomorphic (docs/benchmarks.md).
 */
export class WsWireSocket implements WireSocket {
  private listener: WireListener
  private fault: string | undefined = undefined
  private closed = false
  private awaitingPong = false
  // The per-turn budget: messages handled in turn `turnSeen`, and those waiting for a later turn.
  private turnSeen = -1
  private handledInTurn = 0
  private deferred: Array<Deferred> | undefined = undefined
  private cutForRate = false
  private readonly backlogCapped: boolean
  /** Where sendAscii writes whole frames itself (see unmaskedSocketOf); undefined: through `ws.send`. */
  private readonly unmasked: Duplex | undefined
  /** On a TCP socket, frames go to it past its stream when the stream holds nothing (DirectWrites). */
  private readonly direct: DirectWrites | undefined

  constructor(
    private readonly ws: WebSocket,
    initial: WireListener = idle,
    private readonly gate?: SocketGate
  ) {
    this.listener = initial
    this.backlogCapped = gate?.settings.maxBacklogBytes !== undefined
    this.unmasked = ws.readyState === OPEN ? unmaskedSocketOf(ws) : undefined
    this.direct = this.unmasked === undefined ? undefined : DirectWrites.of(this.unmasked)
    if (gate !== undefined) gate.onExpire = (limit, reason) => this.expire(limit, reason)
    ws.on("message", (data: RawData, isBinary: boolean) => this.receive(isBinary ? BINARY : data.toString()))
    ws.on("pong", () => {
      this.awaitingPong = false
    })
    ws.on("error", (error: Error) => {
      // ws emits "error" for oversized or invalid frames (and then closes with the matching code),
      // and for resets; the listener hears about it once, in onClose.
      this.fault ??= error.message || "socket error"
    })
    ws.on("close", (code: number, reason: Buffer) => {
      gate?.close()
      try {
        this.flush()
        this.finish(code, reason.toString())
      } catch {
        // A listener's failure while closing must not reach the event emitter.
      }
    })
    // On an open socket without extensions, whole text frames are read here, not by ws's receiver
    // (WsFrameReader.ts); the "message" listener above hears what ws still reads.
    readFramesOf(ws, this.receive)
  }

  // WireSocket

  send(text: string): void {
    if (this.ws.readyState !== OPEN) return
    // Marks and the other small control frames of every turn are ASCII: they take sendAscii's one write.
    if (this.unmasked !== undefined && text.length <= MEDIUM_LENGTH && isAscii(text)) return this.sendAscii(text)
    this.ws.send(text)
    if (this.backlogCapped) this.gate!.admitBacklog(this.bufferedAmount)
  }

  /**
   * The media frames' way out, about 100 per second per call. An ASCII text is its own UTF-8, so
   * it is written as Latin-1 (one pass: no UTF-8 length, no encoding). On a server socket without
   * extensions the header (2 or 4 bytes, as Latin-1 characters) and the text are one string,
   * written with one socket write; `ws.send` would build a header of its own and write the two
   * through a cork. Elsewhere the text goes to `ws.send` as a Latin-1 Buffer, a text message.
   */
  sendAscii(text: string): void {
    const ws = this.ws
    if (ws.readyState !== OPEN) return
    const length = text.length
    const socket = this.unmasked
    if (socket !== undefined && length <= MEDIUM_LENGTH) {
      // The header's bytes are Latin-1 characters too: header and text go to the socket as one
      // Latin-1 string, which Node writes from its own stack buffer (no Buffer for the frame).
      const header =
        length <= SHORT_LENGTH
          ? String.fromCharCode(FIN_TEXT, length)
          : String.fromCharCode(FIN_TEXT, MEDIUM_LENGTH_MARKER, length >>> 8, length & 0xff)
      const frame = header + text
      if (this.direct === undefined || !this.direct.write(frame)) socket.write(frame, "latin1")
    } else {
      ws.send(Buffer.from(text, "latin1"), TEXT_FRAME)
    }
    if (this.backlogCapped) this.gate!.admitBacklog(this.bufferedAmount)
  }

  close(code: number, reason: string): void {
    if (this.ws.readyState === OPEN) this.ws.close(code, closeReason(reason))
    else if (this.ws.readyState === 0) this.ws.terminate()
  }

  listen(next: WireListener): void {
    this.listener = this.closed ? idle : next
  }

  get isOpen(): boolean {
    return this.ws.readyState === OPEN
  }

  /**
   * What waits to be sent: `ws`'s count (its stream's), plus what frames written past the stream
   * left in libuv's queue (which also holds the stream's own write in flight, if any: counted
   * twice, so a backlog limit errs toward cutting early by at most one of `ws`'s own frames).
   */
  get bufferedAmount(): number {
    const direct = this.direct
    return direct === undefined ? this.ws.bufferedAmount : this.ws.bufferedAmount + direct.queued
  }

  heartbeat(): boolean {
    const ws = this.ws
    if (ws.readyState !== OPEN) return false
    if (this.awaitingPong) {
      this.fault ??= "no pong: connection presumed dead"
      ws.terminate()
      return false
    }
    this.awaitingPong = true
    ws.ping()
    return true
  }

  // Receiving

  private readonly receive = (message: Deferred): void => {
    if (this.closed) return
    if (this.gate !== undefined && !this.gate.admit()) return
    if (this.deferred !== undefined) return void this.deferred.push(message)
    const turn = turns.touch()
    if (turn !== this.turnSeen) {
      this.turnSeen = turn
      this.handledInTurn = 0
    }
    if (++this.handledInTurn > MESSAGES_PER_TURN) {
      // Over this turn's budget: read nothing more until the backlog is handled, turn by turn.
      this.deferred = [message]
      this.ws.pause()
      return turns.later(this.drain)
    }
    this.handle(message)
  }

  private handle(message: Deferred): void {
    if (message === BINARY) return this.fail(CloseCode.unsupportedData, "binary messages are not accepted: send JSON text frames")
    try {
      this.listener.onText(message)
    } catch (error) {
      this.fail(CloseCode.internalError, `internal error while handling a message: ${(error as Error)?.message ?? "unknown"}`)
    }
  }

  /** At the start of a turn: the next MESSAGES_PER_TURN waiting messages, counted against this turn. */
  private readonly drain = (): void => {
    const queue = this.deferred
    if (queue === undefined) return
    const batch = queue.splice(0, MESSAGES_PER_TURN)
    this.turnSeen = turns.touch()
    this.handledInTurn = batch.length
    for (const message of batch) {
      if (this.closed || this.cutForRate) break
      this.handle(message)
    }
    if (queue.length > 0 && !this.closed && !this.cutForRate) return turns.later(this.drain)
    this.deferred = undefined
    // Messages read on resuming count against what is left of this turn's budget.
    if (!this.closed && !this.cutForRate) this.ws.resume()
  }

  /** The socket is closing: what waited is handled now, in order, before the listener hears the close. */
  private flush(): void {
    const queue = this.deferred
    this.deferred = undefined
    if (queue === undefined || this.cutForRate) return
    for (const message of queue) this.handle(message)
  }

  // Ending

  private finish(code: number, reason: string): void {
    if (this.closed) return
    this.closed = true
    const current = this.listener
    this.listener = idle
    current.onClose(code, reason, this.fault)
  }

  private fail(code: number, reason: string): void {
    this.fault ??= reason
    if (this.ws.readyState === OPEN) this.ws.close(code, closeReason(reason))
  }

  /** A gate's limit was hit: a flood's queued frames are never parsed, nor are those waiting for their turn. */
  private expire(limit: GateLimit, reason: string): void {
    this.fault ??= reason
    if (limit === "backlog") return this.ws.terminate()
    if (limit === "rate") {
      this.cutForRate = true
      this.deferred = undefined
      this.ws.pause()
    }
    this.closeFirmly(CloseCode.policyViolation, reason)
  }

  /** Close, and cut the connection if the peer does not complete the close handshake soon. */
  private closeFirmly(code: number, reason: string): void {
    const ws = this.ws
    if (ws.readyState === OPEN) ws.close(code, closeReason(reason))
    if (ws.readyState !== CLOSED) setTimeout(() => ws.terminate(), CLOSE_GRACE_MS).unref()
  }
}

/** The adapter for one `ws` socket (see WsWireSocket). */
export const wsWireSocket = (ws: WebSocket, initial: WireListener = idle, gate?: SocketGate): WireSocket => new WsWireSocket(ws, initial, gate)
