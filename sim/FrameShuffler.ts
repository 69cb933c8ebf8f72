import { seededRandom } from "./AudioSource.js"

/**
 * Holds outgoing media frames in windows of `size` and releases each window in a seeded random
 * order: Telnyx may deliver chunks out of order, and the gateway must put them back. Other frames
 * (DTMF, marks, stop) flush the window first, so only media is ever reordered.
 */
export class FrameShuffler {
  private readonly window: Array<string> = []
  private readonly random: () => number

  constructor(
    private readonly size: number,
    seed: number
  ) {
    this.random = seededRandom(seed)
  }

  /** Adds a frame; returns the window, shuffled, once it is full (else nothing). */
  push(message: string, send: (message: string) => void): void {
    this.window.push(message)
    if (this.window.length >= this.size) this.flush(send)
  }

  /** Sends what the window holds, shuffled (Fisher-Yates), and empties it. */
  flush(send: (message: string) => void): void {
    const window = this.window
    if (window.length === 0) return
    for (let i = window.length - 1; i > 0; i--) {
      const j = Math.floor(this.random() * (i + 1))
      const swap = window[i]!
      window[i] = window[j]!
      window[j] = swap
    }
    for (const message of window) send(message)
    window.length = 0
  }
}
