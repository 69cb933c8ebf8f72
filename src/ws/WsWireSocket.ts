import type { RawData, WebSocket } from "ws"
import { CloseCode, closeReason, type WireListener, type WireSocket } from "../core/WireSocket.js"

const OPEN = 1

const idle: WireListener = { onText: () => {}, onClose: () => {} }

/**
 * Adapts a `ws` WebSocket (server side from @fastify/websocket, or a dial-out client) to
 * WireSocket. Its listeners are attached here, synchronously, so a carrier's first frames are
 * never lost; a throwing listener is contained: the socket is closed with 1011 and nothing else
 * is disturbed.
 */
export const wsWireSocket = (ws: WebSocket, initial: WireListener = idle): WireSocket => {
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

  ws.on("message", (data: RawData, isBinary: boolean) => {
    if (closed) return
    if (isBinary) return fail(CloseCode.unsupportedData, "binary messages are not accepted: send JSON text frames")
    try {
      listener.onText(data.toString())
    } catch (error) {
      fail(CloseCode.internalError, `internal error while handling a message: ${(error as Error)?.message ?? "unknown"}`)
    }
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
    try {
      finish(code, reason.toString())
    } catch {
      // A listener's failure while closing must not reach the event emitter.
    }
  })

  return {
    send: (text) => {
      if (ws.readyState === OPEN) ws.send(text)
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
