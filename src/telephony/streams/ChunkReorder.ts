/**
 * Puts numbered media chunks back in order with a small bounded window (Telnyx does not guarantee
 * frame order). Chunks are delivered as soon as they are next in line; a chunk ahead of the next
 * expected one waits in a ring of `window` slots. A duplicate or late chunk (already delivered) is
 * dropped. A gap the window cannot bridge is beyond repair: `push` returns false and the caller
 * closes the stream.
 *
 * Numbering starts at `first` (Telnyx and Twilio count from 1). Until the first chunk has been
 * delivered, an overflowing window re-bases on the lowest chunk seen instead of failing, so a
 * stream whose numbering starts elsewhere costs one window of delay, once.
 *
 * No allocation per chunk: the ring holds the payload strings that arrived, and their timestamps
 * in a number array beside it (the recorder places audio by them: docs/recording.md).
 */
export class ChunkReorder {
  private readonly slots: Array<string | undefined>
  private readonly stamps: Float64Array
  private next: number
  private held = 0
  private delivered = false
  /** Chunks dropped as duplicates or late arrivals. */
  dropped = 0

  constructor(
    private readonly window: number,
    private readonly deliver: (payload: string, timestampMs: number) => void,
    first = 1
  ) {
    this.slots = new Array<string | undefined>(window).fill(undefined)
    this.stamps = new Float64Array(window)
    this.next = first
  }

  /** Offers chunk `chunk`; false when the stream is beyond repair. */
  push(chunk: number, payload: string, timestampMs = -1): boolean {
    if (chunk === this.next && this.held === 0) {
      this.next++
      this.delivered = true
      this.deliver(payload, timestampMs)
      return true
    }
    if (chunk < this.next) {
      this.dropped++
      return true
    }
    if (chunk - this.next >= this.window && (this.delivered || !this.rebase(chunk))) return false
    const slot = chunk % this.window
    if (this.slots[slot] !== undefined) {
      this.dropped++
      return true
    }
    this.slots[slot] = payload
    this.stamps[slot] = timestampMs
    this.held++
    this.drain()
    return true
  }

  /** Chunks waiting for an earlier one. */
  get pending(): number {
    return this.held
  }

  /** The stream ended: delivers what is held, in chunk order, skipping the gaps that never filled. */
  flush(): void {
    for (let n = this.next; this.held > 0 && n < this.next + this.window; n++) {
      const slot = n % this.window
      const payload = this.slots[slot]
      if (payload === undefined) continue
      this.slots[slot] = undefined
      this.held--
      this.deliver(payload, this.stamps[slot]!)
    }
    this.held = 0
  }

  private drain() {
    for (;;) {
      const slot = this.next % this.window
      const payload = this.slots[slot]
      if (payload === undefined) return
      this.slots[slot] = undefined
      this.held--
      this.next++
      this.delivered = true
      this.deliver(payload, this.stamps[slot]!)
    }
  }

  /**
   * Before anything was delivered: move the window so `chunk` fits. With nothing held, `chunk`
   * becomes the newest slot (earlier chunks may still arrive); otherwise the window starts at the
   * lowest chunk held, which is delivered at once. False when even that cannot bridge the gap.
   */
  private rebase(chunk: number): boolean {
    if (this.held === 0) {
      this.next = Math.max(0, chunk - this.window + 1)
      return true
    }
    let lowest = this.next
    while (this.slots[lowest % this.window] === undefined) lowest++
    if (chunk - lowest >= this.window) return false
    this.next = lowest
    this.drain()
    return chunk - this.next < this.window
  }
}
