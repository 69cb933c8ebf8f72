import { Socket } from "node:net"
import type { Duplex } from "node:stream"

/** The fields of a Writable's state a direct write reads (node:internal/streams/writable). */
interface WritableStateView {
  readonly length: number
  readonly writing: boolean
  readonly corked: number
  readonly ending: boolean
  readonly destroyed: boolean
  readonly errored: unknown
}

/** A TCP socket's handle: libuv's queue of bytes written but not yet taken by the kernel. */
interface StreamHandleView {
  readonly writeQueueSize: number
}

interface SocketInternals {
  readonly _writableState?: WritableStateView
  readonly _handle?: StreamHandleView | null
  readonly connecting: boolean
  _write(chunk: string, encoding: BufferEncoding, done: (error?: Error | null) => void): void
}

/**
 * Writes a media frame to a TCP socket past its Writable stream (docs/design.md, "The path of a
 * media frame"). `socket.write` hands a string to the stream, which counts it, calls the socket's
 * `_write` (Node's write to the handle: libuv tries the kernel at once), and, the write done,
 * queues a tick to finish it. When the stream holds nothing and is not writing, corked or ending,
 * that detour does nothing for the order of the bytes, so `write` calls `_write` itself; otherwise
 * it returns false and the caller writes through the stream, behind what the stream holds.
 *
 * What the kernel did not take at once waits in libuv's queue, in order with everything written
 * after it (libuv writes a handle's requests in order, whoever made them); `queued` reports it,
 * so a backlog reads the same as through the stream (where it counts until the write completes).
 * A write that fails destroys the socket with the error, as the stream would.
 */
export class DirectWrites {
  private constructor(
    private readonly socket: Duplex & SocketInternals,
    private readonly state: WritableStateView
  ) {}

  /** For a `net.Socket` with the stream state and handle this relies on; otherwise undefined. */
  static of(socket: Duplex): DirectWrites | undefined {
    if (!(socket instanceof Socket)) return undefined
    const internals = socket as unknown as Duplex & SocketInternals
    const state = internals._writableState
    if (state === undefined || internals._write !== Socket.prototype._write) return undefined
    if (typeof state.length !== "number" || typeof state.writing !== "boolean" || typeof state.corked !== "number" || typeof state.ending !== "boolean") return undefined
    if (typeof internals._handle?.writeQueueSize !== "number") return undefined
    return new DirectWrites(internals, state)
  }

  /** Writes `text` as Latin-1 straight to the socket; false when the stream must carry it (see above). */
  write(text: string): boolean {
    const { socket, state } = this
    if (state.length !== 0 || state.writing || state.corked !== 0 || state.ending || state.destroyed || state.errored != null || socket.connecting) {
      return false
    }
    socket._write(text, "latin1", this.done)
    return true
  }

  /** Bytes written here that the kernel has not taken yet. */
  get queued(): number {
    return this.socket._handle?.writeQueueSize ?? 0
  }

  private readonly done = (error?: Error | null): void => {
    if (error != null && !this.socket.destroyed) this.socket.destroy(error)
  }
}
