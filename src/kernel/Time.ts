import { Clock, Effect } from "effect"

/**
 * Time in callgate (docs/design.md, "One clock"): every reading of the time comes from Effect's
 * `Clock` (`Clock.currentTimeMillis` in effects, `clock.unsafeCurrentTimeMillis()` of the service's
 * Clock in synchronous callbacks), so `TestClock` drives it in tests. The one exception is the
 * per-frame path (the relay, the turn tracker, the recorder's window), which stamps frames with the
 * monotonic `performance.now()`; `frameTimeToEpochMs` turns such a stamp into wall-clock time.
 * This file is the only one in src/ that builds a `Date` (test/architecture/clock.test.ts).
 */

/** An epoch-milliseconds time as ISO 8601. */
export const isoAt = (epochMs: number): string => new Date(epochMs).toISOString()

/** An epoch-milliseconds time as a Date. */
export const dateAt = (epochMs: number): Date => new Date(epochMs)

/** An ISO 8601 time as an RFC 2822 one (Twilio's REST dates). */
export const rfc2822At = (iso: string): string => new Date(iso).toUTCString()

/** The current time as ISO 8601, from the Clock. */
export const nowIso: Effect.Effect<string> = Effect.map(Clock.currentTimeMillis, isoAt)

/** The current time as a Date, from the Clock. */
export const nowDate: Effect.Effect<Date> = Effect.map(Clock.currentTimeMillis, dateAt)

/** A per-frame stamp (monotonic `performance.now()` milliseconds) as epoch milliseconds. */
export const frameTimeToEpochMs = (atMs: number): number => performance.timeOrigin + atMs
