import { performance } from "node:perf_hooks"
import { FRAME_BYTES, FRAME_MS } from "./Mulaw.js"

const MS_PER_BYTE = FRAME_MS / FRAME_BYTES

/**
 * What a carrier does with the audio an application sends it: plays it to the caller in real time.
 * Audio "plays" at 20 ms per 160 bytes, back to back; a mark is due when all audio queued before it
 * has played (at once when nothing is queued). `clear` drops the queued audio and returns every
 * outstanding mark at once, as Twilio and Telnyx do. One timer, armed for the next mark only.
 */
export class Playout {
  private endsAt = 0
  private readonly pending: Array<{ readonly name: string; readonly dueAt: number }> = []
  private timer: NodeJS.Timeout | undefined
  private closed = false

  constructor(
    private readonly onMarkPlayed: (name: string, cleared: boolean) => void,
    private readonly now: () => number = () => performance.now(),
    /** Audio arriving with nothing queued starts playing this much later (the carrier's jitter buffer). */
    private readonly delayMs = 0
  ) {}

  /** Queues `bytes` of mu-law audio behind whatever is still playing. */
  enqueue(bytes: number): void {
    const now = this.now()
    if (this.endsAt < now) this.endsAt = now + this.delayMs
    this.endsAt += bytes * MS_PER_BYTE
  }

  mark(name: string): void {
    if (this.closed) return
    const now = this.now()
    if (this.pending.length === 0 && this.endsAt <= now) {
      this.onMarkPlayed(name, false)
      return
    }
    this.pending.push({ name, dueAt: Math.max(this.endsAt, now) })
    this.arm()
  }

  /** Drops queued audio; returns how many milliseconds of it were dropped. */
  clear(): number {
    const now = this.now()
    const dropped = Math.max(0, this.endsAt - now)
    this.endsAt = now
    this.disarm()
    const marks = this.pending.splice(0)
    for (const mark of marks) this.onMarkPlayed(mark.name, true)
    return dropped
  }

  /** Milliseconds of audio still queued. */
  queuedMs(): number {
    return Math.max(0, this.endsAt - this.now())
  }

  /** Marks waiting for their audio to play. */
  get outstandingMarks(): number {
    return this.pending.length
  }

  close(): void {
    this.closed = true
    this.disarm()
    this.pending.length = 0
  }

  private arm() {
    if (this.timer !== undefined || this.pending.length === 0) return
    const wait = this.pending[0]!.dueAt - this.now()
    this.timer = setTimeout(this.fire, Math.max(1, wait))
  }

  private disarm() {
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.timer = undefined
  }

  private readonly fire = () => {
    this.timer = undefined
    const now = this.now() + 0.5
    while (this.pending.length > 0 && this.pending[0]!.dueAt <= now) {
      this.onMarkPlayed(this.pending.shift()!.name, false)
    }
    this.arm()
  }
}
