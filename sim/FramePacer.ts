import { performance } from "node:perf_hooks"
import { FRAME_MS } from "./Mulaw.js"

/**
 * Calls `onFrame(index, dueMs)` once per frame interval, scheduled against the start time rather
 * than chained intervals, so timer lateness never accumulates into drift: frame n is due at
 * start + n * interval. When the event loop was blocked, the frames that fell due are sent at once
 * (as a carrier's jitter buffer would), keeping the count right.
 */
export class FramePacer {
  private timer: NodeJS.Timeout | undefined
  private startedAt = 0
  private index = 0
  private active = false

  constructor(
    private readonly onFrame: (index: number, dueMs: number) => void,
    private readonly intervalMs: number = FRAME_MS
  ) {}

  get running(): boolean {
    return this.active
  }

  /** Frames delivered so far. */
  get framesDue(): number {
    return this.index
  }

  start(): void {
    if (this.active) return
    this.active = true
    this.startedAt = performance.now()
    this.index = 0
    this.tick()
  }

  stop(): void {
    this.active = false
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.timer = undefined
  }

  private readonly tick = (): void => {
    this.timer = undefined
    // Timers may fire a fraction of a millisecond early; half a millisecond of slack avoids a spin.
    const now = performance.now() + 0.5
    while (this.active && this.startedAt + this.index * this.intervalMs <= now) {
      const due = this.startedAt + this.index * this.intervalMs
      this.index++
      this.onFrame(this.index - 1, due)
    }
    if (this.active) {
      const wait = this.startedAt + this.index * this.intervalMs - performance.now()
      this.timer = setTimeout(this.tick, Math.max(1, wait))
    }
  }
}
