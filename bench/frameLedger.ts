/**
 * Exact frame accounting for one direction of the media path, from the stamps the frames carry
 * (sim/FrameStamp.ts: stream id, sequence number, send time on the shared monotonic clock).
 *
 * The sender notes, for each stream, the sequence numbers it sent inside the measurement window
 * (its counters at the window's first and last instant: a contiguous range per stream). The
 * receiver records every stamped frame it gets while recording (stream, sequence, delay). When
 * the window is over and a grace period has passed, the receiver is given the sender's ranges and
 * counts, per stream, which sequence numbers of the range arrived: delivered and lost are exact,
 * and the delay percentiles cover exactly the frames sent inside the window. A frame still
 * missing after the grace period counts as lost (for a phone call it is).
 */
import { createHistogram } from "node:perf_hooks"
import { type FrameStamp, readStampInto } from "../sim/FrameStamp.js"

/** Per stream: [streamId, first sequence number in the window, last]. Empty ranges have last < first. */
export type SentRanges = ReadonlyArray<readonly [number, number, number]>

export interface DirectionFigures {
  readonly sent: number
  readonly delivered: number
  readonly lost: number
  /** lost / sent, percent. */
  readonly lossPercent: number
  /** Frames that arrived more than once (should be 0). */
  readonly duplicates: number
  /** Frames received without a readable stamp (a relay that altered the first bytes). */
  readonly unstamped: number
  /** Receive time minus send time, over the frames of the window that arrived, ms. */
  readonly delayMs: { readonly p50: number; readonly p90: number; readonly p99: number; readonly p999: number; readonly max: number }
}

interface StreamRecord {
  seqs: Array<number>
  delays: Array<number>
}

/** The receiving side of one direction. `receive` is on the per-frame path: no allocation beyond array growth. */
export class ReceiveLedger {
  private streams = new Map<number, StreamRecord>()
  private recording = false
  private unstamped = 0
  private readonly stamp: FrameStamp = { callId: 0, seq: 0, sentUs: 0 }

  /** Forgets everything and starts recording frames. */
  record(): void {
    this.streams = new Map()
    this.unstamped = 0
    this.recording = true
  }

  receive(payload: Uint8Array, atUs: number): void {
    if (!this.recording) return
    if (!readStampInto(payload, this.stamp)) {
      this.unstamped++
      return
    }
    let stream = this.streams.get(this.stamp.callId)
    if (stream === undefined) this.streams.set(this.stamp.callId, (stream = { seqs: [], delays: [] }))
    stream.seqs.push(this.stamp.seq)
    stream.delays.push(atUs - this.stamp.sentUs)
  }

  /** Stops recording and counts the sender's ranges. */
  settle(ranges: SentRanges): DirectionFigures {
    this.recording = false
    const histogram = createHistogram({ lowest: 1, highest: 120_000_000, figures: 3 })
    let sent = 0
    let delivered = 0
    let duplicates = 0
    for (const [id, first, last] of ranges) {
      if (last < first) continue
      sent += last - first + 1
      const stream = this.streams.get(id)
      if (stream === undefined) continue
      const seen = new Uint8Array(last - first + 1)
      for (let i = 0; i < stream.seqs.length; i++) {
        const seq = stream.seqs[i]!
        if (seq < first || seq > last) continue
        if (seen[seq - first]) {
          duplicates++
          continue
        }
        seen[seq - first] = 1
        delivered++
        histogram.record(Math.max(1, Math.round(stream.delays[i]!)))
      }
    }
    this.streams = new Map()
    const ms = (us: number) => (delivered > 0 ? Math.round(us / 10) / 100 : NaN)
    return {
      sent,
      delivered,
      lost: sent - delivered,
      lossPercent: sent > 0 ? Math.round(((sent - delivered) / sent) * 1e6) / 1e4 : NaN,
      duplicates,
      unstamped: this.unstamped,
      delayMs: {
        p50: ms(histogram.percentile(50)),
        p90: ms(histogram.percentile(90)),
        p99: ms(histogram.percentile(99)),
        p999: ms(histogram.percentile(99.9)),
        max: ms(histogram.max)
      }
    }
  }
}

/**
 * The sending side: `frames()` of each stream is the last sequence number it stamped (sequence
 * numbers run 1, 2, 3... per stream). `open` and `close` snapshot every stream at the window's
 * edges; streams that appear during the window start from 1.
 */
export class SendLedger {
  private readonly opened = new Map<number, number>()

  constructor(private readonly streams: () => Iterable<readonly [id: number, lastSeq: number]>) {}

  open(): void {
    this.opened.clear()
    for (const [id, lastSeq] of this.streams()) this.opened.set(id, lastSeq)
  }

  close(): SentRanges {
    const ranges: Array<readonly [number, number, number]> = []
    for (const [id, lastSeq] of this.streams()) ranges.push([id, (this.opened.get(id) ?? 0) + 1, lastSeq])
    return ranges
  }
}
