import type { Session } from "./api.js"

/** Latency statistics, computed in the browser from the sessions' turns (the server keeps no aggregates). */

/** The nearest-rank percentile of sorted values (p in 0..100); null for none. */
export const percentile = (sorted: ReadonlyArray<number>, p: number): number | null => {
  if (sorted.length === 0) return null
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!
}

export interface TimedLatency {
  /** When the agent answered, epoch ms. */
  readonly at: number
  readonly latencyMs: number
}

export const answeredTurns = (sessions: ReadonlyArray<Session>): Array<TimedLatency> =>
  sessions.flatMap((session) =>
    session.turns.flatMap((turn) =>
      turn.latencyMs !== null && turn.agentRespondedAt !== null ? [{ at: Date.parse(turn.agentRespondedAt), latencyMs: turn.latencyMs }] : []
    )
  )

export interface PerMinute {
  /** Start of each minute, epoch seconds (uPlot's x unit). */
  readonly minutes: Array<number>
  readonly p50: Array<number | null>
  readonly p95: Array<number | null>
  readonly turns: Array<number>
}

/** p50 and p95 of the latencies answered in each of the `minutes` minutes before `now`. */
export const perMinutePercentiles = (latencies: ReadonlyArray<TimedLatency>, now: number, minutes = 60): PerMinute => {
  const end = Math.floor(now / 60_000) * 60_000 + 60_000
  const start = end - minutes * 60_000
  const buckets: Array<Array<number>> = Array.from({ length: minutes }, () => [])
  for (const { at, latencyMs } of latencies) {
    if (at < start || at >= end) continue
    buckets[Math.floor((at - start) / 60_000)]!.push(latencyMs)
  }
  const sorted = buckets.map((bucket) => bucket.sort((a, b) => a - b))
  return {
    minutes: sorted.map((_, i) => (start + i * 60_000) / 1000),
    p50: sorted.map((bucket) => percentile(bucket, 50)),
    p95: sorted.map((bucket) => percentile(bucket, 95)),
    turns: sorted.map((bucket) => bucket.length)
  }
}

export interface Histogram {
  /** Lower edge of each bin, ms. */
  readonly edges: Array<number>
  readonly counts: Array<number>
  readonly binMs: number
}

const BIN_WIDTHS = [10, 20, 50, 100, 200, 250, 500, 1000, 2000, 5000]

/** Latencies in equal bins, the narrowest of BIN_WIDTHS that needs at most `maxBins`. */
export const histogram = (values: ReadonlyArray<number>, maxBins = 24): Histogram => {
  if (values.length === 0) return { edges: [], counts: [], binMs: 0 }
  const min = Math.min(...values)
  const max = Math.max(...values)
  const binMs = BIN_WIDTHS.find((width) => Math.floor(max / width) - Math.floor(min / width) + 1 <= maxBins) ?? 10_000
  const first = Math.floor(min / binMs)
  const count = Math.floor(max / binMs) - first + 1
  const counts = new Array<number>(count).fill(0)
  for (const value of values) counts[Math.floor(value / binMs) - first]! += 1
  return { edges: counts.map((_, i) => (first + i) * binMs), counts, binMs }
}

export interface SessionCounts {
  readonly total: number
  readonly active: number
  readonly completed: number
  readonly failed: number
  readonly timeout: number
  /** Sessions the error fallback took over: transferred, or its webhook's markup applied (they are also failed). */
  readonly rescued: number
  /** Sessions whose error fallback ran but did not take the caller over (webhook failed, carrier refused, ...). */
  readonly rescueFailed: number
}

/** Outcomes in which the fallback took the caller over; `hung_up` (a disabled fallback) is neither. */
const RESCUED: ReadonlySet<string> = new Set(["transferred", "markup_applied"])
const FAILED_RESCUE: ReadonlySet<string> = new Set(["unexpected_response", "webhook_failed", "carrier_failed"])

export const sessionCounts = (sessions: ReadonlyArray<Session>): SessionCounts => ({
  total: sessions.length,
  active: sessions.filter((s) => s.status === "active").length,
  completed: sessions.filter((s) => s.status === "completed").length,
  failed: sessions.filter((s) => s.status === "failed").length,
  timeout: sessions.filter((s) => s.status === "timeout").length,
  rescued: sessions.filter((s) => s.fallback !== null && RESCUED.has(s.fallback.outcome)).length,
  rescueFailed: sessions.filter((s) => s.fallback !== null && FAILED_RESCUE.has(s.fallback.outcome)).length
})
