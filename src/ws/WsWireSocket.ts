import type { RawData, WebSocket } from "ws"
import { MESSAGES_PER_TURN, type SocketGate, TurnClock } from "../core/SocketGate.js"
import { CloseCode, closeReason, type WireListener, type WireSocket } from "../core/WireSocket.js"

const OPEN = 1

const idle: WireListener = { onText: () => {}, onClose: () => {} }

/** A peer that does not answer our close frame within this long is cut (ws itself waits 30 s). */
const CLOSE_GRACE_MS = 1000

/** The event loop's turns, shared by every socket of the process (the per-turn message budget). */
const turns = new TurnClock((advance) => void setImmediate(advance))

/** A binary message waiting its turn (refused when its turn comes, in order). */
const BINARY = Symbol("binary")
type Deferred = string | typeof BINARY

/**
 * Adapts a `ws` WebSocket (server side from @fastify/websocket, or a dial-out client) to
 * WireSocket. Its listeners are attached here, synchronously, so a carrier's first frames are
 * never lost; a throwing listener is contained: the socket is closed with 1011 and nothing else
 * is disturbed. A `gate` (ws/SocketGuards.ts) enforces the per-socket limits: a socket over its
 * message rate, idle or unauthenticated too long is closed with 1008, one whose peer stopped
 * reading is cut; its listener hears either as a fault.
 *
 * Fairness (docs/security.md, "Per-socket limits"): at most MESSAGES_PER_TURN messages of this
 * socket are handled per event-loop turn. The rest of a burst is kept in order, the socket stops
 * reading, and each following turn hands the listener the next MESSAGES_PER_TURN
 * (TurnClock.later), so other sockets' frames are read in between. At real cadence no message
 * ever waits; per frame it costs a comparison with one shared turn number (no allocation, no timer).
 */
export const wsWireSocket = (ws: WebSocket, initial: WireListener = idle, gate?: SocketGate): WireSocket => {
  let listener = initial
  let fault: string | undefined
  let closed = false
  let awaitingPong = false

  const finish = (code: number, reason: string) => {
    if (closed) return
    closed = true
    const current = listener
    listener = idle
    current.onClose(code, reason, fault)
  }

  const fail = (code: number, reason: string) => {
    fault ??= reason
    if (ws.readyState === OPEN) ws.close(code, closeReason(reason))
  }

  /** Close, and cut the connection if the peer does not complete the close handshake soon. */
  const closeFirmly = (code: number, reason: string) => {
    if (ws.readyState === OPEN) ws.close(code, closeReason(reason))
    if (ws.readyState !== 3) setTimeout(() => ws.terminate(), CLOSE_GRACE_MS).unref()
  }

  // The per-turn budget: messages handled in turn `turnSeen`, and those waiting for a later turn.
  let turnSeen = -1
  let handledInTurn = 0
  let deferred: Array<Deferred> | undefined
  let cutForRate = false

  const backlogCapped = gate?.settings.maxBacklogBytes !== undefined
  if (gate !== undefined) {
    gate.onExpire = (limit, reason) => {
      fault ??= reason
      if (limit === "backlog") return ws.terminate()
      // Read nothing more from a socket cut by a limit (a flood's queued frames are never parsed,
      // nor are those waiting for their turn).
      if (limit === "rate") {
        cutForRate = true
        deferred = undefined
        ws.pause()
      }
      closeFirmly(CloseCode.policyViolation, reason)
    }
  }

  const handle = (message: Deferred) => {
    if (message === BINARY) return fail(CloseCode.unsupportedData, "binary messages are not accepted: send JSON text frames")
    try {
      listener.onText(message)
    } catch (error) {
      fail(CloseCode.internalError, `internal error while handling a message: ${(error as Error)?.message ?? "unknown"}`)
    }
  }

  /** At the start of a turn: the next MESSAGES_PER_TURN waiting messages, counted against this turn. */
  const drain = () => {
    const queue = deferred
    if (queue === undefined) return
    const batch = queue.splice(0, MESSAGES_PER_TURN)
    turnSeen = turns.current
    handledInTurn = batch.length
    for (const message of batch) {
      if (closed || cutForRate) break
      handle(message)
    }
    if (queue.length > 0 && !closed && !cutForRate) return turns.later(drain)
    deferred = undefined
    // Messages read on resuming count against what is left of this turn's budget.
    if (!closed && !cutForRate) ws.resume()
  }

  /** The socket is closing: what waited is handled now, in order, before the listener hears the close. */
  const flush = () => {
    const queue = deferred
    deferred = undefined
    if (queue === undefined || cutForRate) return
    for (const message of queue) handle(message)
  }

  ws.on("message", (data: RawData, isBinary: boolean) => {
    if (closed) return
    if (gate !== undefined && !gate.admit()) return
    if (deferred !== undefined) return void deferred.push(isBinary ? BINARY : data.toString())
    const turn = turns.touch()
    if (turn !== turnSeen) {
      turnSeen = turn
      handledInTurn = 0
    }
    if (++handledInTurn > MESSAGES_PER_TURN) {
      // Over this turn's budget: read nothing more until the backlog is handled, turn by turn.
      deferred = [isBinary ? BINARY : data.toString()]
      ws.pause()
      return turns.later(drain)
    }
    handle(isBinary ? BINARY : data.toString())
  })
  ws.on("pong", () => {
    awaitingPong = false
  })
  ws.on("error", (error: Error) => {
    // ws emits "error" for oversized or invalid frames (and then closes with the matching code),
    // and for resets; the listener hears about it once, in onClose.
    fault ??= error.message || "socket error"
  })
  ws.on("close", (code: number, reason: Buffer) => {
    gate?.close()
    try {
      flush()
      finish(code, reason.toString())
    } catch {
      // A listener's failure while closing must not reach the event emitter.
    }
  })

  return {
    send: (text) => {
      if (ws.readyState !== OPEN) return
      ws.send(text)
      if (backlogCapped) gate!.admitBacklog(ws.bufferedAmount)
    },
    close: (code, reason) => {
      if (ws.readyState === OPEN) ws.close(code, closeReason(reason))
      else if (ws.readyState === 0) ws.terminate()
    },
    listen: (next) => {
      listener = closed ? idle : next
    },
    get isOpen() {
      return ws.readyState === OPEN
    },
    get bufferedAmount() {
      return ws.bufferedAmount
    },
    heartbeat: () => {
      if (ws.readyState !== OPEN) return false
      if (awaitingPong) {
        fault ??= "no pong: connection presumed dead"
        ws.terminate()
        return false
      }
      awaitingPong = true
      ws.ping()
      return true
    }
  }
}
