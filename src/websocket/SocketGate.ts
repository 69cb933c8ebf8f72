/**
 * Per-socket limits of one media stream or agent WebSocket (docs/security.md, "Per-socket
 * limits"): a message rate limit (token bucket), the time a stream may take to authenticate, and,
 * for carrier streams, how long it may go without a frame. The adapter calls `admit` once per
 * message (a decrement and a comparison: no clock read on the media path); a shared ticker
 * (websocket/SocketGuards.ts) refills the bucket and checks the deadlines, and calls `expire` when one
 * is missed. Pure: no timers, no sockets.
 */
export type GateLimit = "rate" | "idle" | "handshake" | "backlog"

/**
 * Messages of one socket handled in one turn (one event-loop callback, such as a read; see
 * TurnClock and docs/security.md, "Per-socket limits"): the rest of a burst waits for later
 * macrotasks, so one flooding socket cannot hold the loop while other calls' frames wait. Real
 * traffic is one frame per 20 ms per socket, far below it.
 */
export const MESSAGES_PER_TURN = 16

/**
 * Numbers the turns for the per-turn budget. A turn is one callback from the event loop (a socket
 * read, a timer): `touch` answers the current turn and asks `endOfTurn` (a microtask, from the
 * adapter) to advance it once, when the callback is over; so every socket's messages of one read
 * share a turn, and the next read starts a new one. `later` runs waiting tasks in a following
 * macrotask (`nextTurn`: setImmediate), after the loop has read the other sockets; a task that
 * handles messages touches the clock for its own turn. One for all sockets; one microtask per
 * callback in which messages arrived, none per message.
 */
export class TurnClock {
  private turn = 0
  private pending = false
  private laterPending = false
  private waiting: Array<() => void> = []
  private readonly advance = () => {
    this.pending = false
    this.turn++
  }
  private readonly runWaiting = () => {
    this.laterPending = false
    const tasks = this.waiting
    this.waiting = []
    for (const task of tasks) task()
  }

  constructor(
    private readonly endOfTurn: (advance: () => void) => void,
    private readonly nextTurn: (run: () => void) => void
  ) {}

  touch(): number {
    if (!this.pending) {
      this.pending = true
      this.endOfTurn(this.advance)
    }
    return this.turn
  }

  later(task: () => void): void {
    this.waiting.push(task)
    if (!this.laterPending) {
      this.laterPending = true
      this.nextTurn(this.runWaiting)
    }
  }
}

/**
 * A tick this late means callgate's own event loop stalled (GC, a long task): the peer's frames
 * are queued unread, so the stalled time does not count towards its idle or handshake deadline.
 */
export const STALL_MS = 1000

export interface GateSettings {
  /** Messages per second, sustained. */
  readonly rate: number
  /** Messages allowed at once above the sustained rate (the bucket's size). */
  readonly burst: number
  /** No message for this long expires the gate ("idle"); undefined: no idle limit. */
  readonly idleTimeoutMs?: number | undefined
  /** Not authenticated this long after opening expires the gate ("handshake"); undefined: none. */
  readonly handshakeTimeoutMs?: number | undefined
  /** Bytes queued towards the peer beyond which the socket is cut ("backlog"); undefined: none. */
  readonly maxBacklogBytes?: number | undefined
}

export class SocketGate {
  private tokens: number
  /** When the bucket was last refilled (by the ticker, or by `admit` once it ran dry). */
  private lastRefillMs: number
  /**
   * Until then the bucket may hold more than its burst: what a stall of this process let queue up
   * (at most the sustained rate over the stall) is not a flood. Past it, back to the burst.
   */
  private stallCreditUntilMs = Number.NEGATIVE_INFINITY
  private messages = 0
  private messagesAtLastTick = 0
  private lastActiveMs: number
  private expired: GateLimit | undefined
  /** Set by the adapter: cut the socket for `limit` with a reason. */
  onExpire: ((limit: GateLimit, reason: string) => void) | undefined
  /** Set by whoever authenticates the socket; a gate without one needs no handshake. */
  authenticated: (() => boolean) | undefined

  constructor(
    readonly settings: GateSettings,
    openedAtMs: number,
    /** Told once, when a limit is exceeded (metrics). */
    private readonly report?: (limit: GateLimit) => void,
    /**
     * The clock, read only when the bucket runs dry: the frames a stall of this process queued can
     * arrive before the ticker has run, and are measured against the time they took to queue.
     */
    private readonly now?: () => number
  ) {
    this.tokens = settings.burst
    this.lastRefillMs = openedAtMs
    this.lastActiveMs = openedAtMs
    this.handshakeDeadlineMs = settings.handshakeTimeoutMs === undefined ? undefined : openedAtMs + settings.handshakeTimeoutMs
  }

  private handshakeDeadlineMs: number | undefined

  /** One message arrived: false when it is over the rate limit (the gate then expires). */
  admit(): boolean {
    if (this.expired !== undefined) return false
    this.messages++
    if (--this.tokens >= 0) return true
    if (this.now !== undefined) {
      this.tokens++
      this.refill(this.now())
      if (--this.tokens >= 0) return true
    }
    this.expire("rate", `message rate limit exceeded (${this.settings.rate}/s, burst ${this.settings.burst})`)
    return false
  }

  /** Called after a send with the socket's queued bytes: false when beyond the backlog cap (the gate then expires). */
  admitBacklog(bufferedBytes: number): boolean {
    const max = this.settings.maxBacklogBytes
    if (max === undefined || bufferedBytes <= max || this.expired !== undefined) return this.expired === undefined
    this.expire("backlog", `the peer stopped reading: more than ${max} bytes queued`)
    return false
  }

  get isExpired(): boolean {
    return this.expired !== undefined
  }

  /**
   * The bucket gains the sustained rate over the time since its last refill, up to the burst. A
   * refill `STALL_MS` or more after the last one means this process stalled (the ticker runs every
   * 100 ms while the loop turns): the peer's frames of that time sat unread in the kernel, so the
   * bucket gains the whole stall's worth above what it held (capped at the burst), and keeps any
   * of it unspent for as long again, while the backlog is read. A peer that really floods is
   * measured over time this process was reading, and cut as before.
   */
  private refill(nowMs: number): void {
    const elapsedMs = nowMs - this.lastRefillMs
    if (elapsedMs <= 0) return
    this.lastRefillMs = nowMs
    const { rate, burst } = this.settings
    const gained = (rate * elapsedMs) / 1000
    if (elapsedMs >= STALL_MS) {
      this.tokens = Math.min(burst, this.tokens) + gained
      this.stallCreditUntilMs = nowMs + elapsedMs
    } else if (this.tokens > burst && nowMs < this.stallCreditUntilMs) {
      // What is left of a stall's credit is kept; the rate adds nothing above the burst.
    } else {
      this.tokens = Math.min(burst, this.tokens + gained)
    }
  }

  /**
   * The ticker: refills the bucket and enforces the deadlines at `nowMs`; `elapsedMs` is the time
   * since the ticker's previous tick (a stall of this process when it reaches STALL_MS).
   */
  tick(nowMs: number, elapsedMs: number): void {
    if (this.expired !== undefined) return
    const { idleTimeoutMs } = this.settings
    this.refill(nowMs)
    if (elapsedMs >= STALL_MS) {
      this.lastActiveMs = nowMs
      if (this.handshakeDeadlineMs !== undefined) this.handshakeDeadlineMs += elapsedMs
    }
    if (this.messages !== this.messagesAtLastTick) {
      this.messagesAtLastTick = this.messages
      this.lastActiveMs = nowMs
    }
    if (this.handshakeDeadlineMs !== undefined) {
      if (this.authenticated === undefined || this.authenticated()) this.handshakeDeadlineMs = undefined
      else if (nowMs >= this.handshakeDeadlineMs) {
        return this.expire("handshake", `not authenticated within ${this.settings.handshakeTimeoutMs} ms`)
      }
    }
    if (idleTimeoutMs !== undefined && nowMs - this.lastActiveMs >= idleTimeoutMs) {
      this.expire("idle", `no frame for ${idleTimeoutMs} ms`)
    }
  }

  /** The socket is gone: the gate stops (the ticker forgets it). */
  close(): void {
    this.closed = true
  }

  get isClosed(): boolean {
    return this.closed
  }

  private closed = false

  private expire(limit: GateLimit, reason: string) {
    this.expired = limit
    this.report?.(limit)
    this.onExpire?.(limit, reason)
  }
}
