import { Context, Exit, Option, type Tracer } from "effect"
import type { AnsweredTurn, EndedTurn } from "./TurnTracker.js"
import { frameTimeToEpochMs, isoAt } from "../kernel/Time.js"
import { spansLeave } from "../observability/Tracing.js"

/** The relay's monotonic milliseconds (performance.now()) as a span time: wall-clock nanoseconds. */
const spanTime = (atMs: number) => BigInt(Math.round((performance.timeOrigin + atMs) * 1000)) * 1000n

/**
 * One span per caller turn, a child of the session span (docs/observability.md, "The span tree of a call"):
 * it starts at the caller's last voiced frame (where the response timer starts) and ends when the
 * turn is over for callgate: answered (and, where the carrier confirms playout, heard or cut by a
 * `clear`), superseded by the caller speaking again, or cut by the end of the call. Made straight
 * on the tracer, synchronously, from the turn tracker's callbacks: a few calls per turn, none per
 * frame. With tracing off, spans are bare id holders that nothing reads (no attributes kept, nothing
 * exported, no log line names a turn's span): `turnSpansOn` then gives `noTurnSpans`, which makes none.
 */
export class TurnSpans {
  private readonly open = new Map<number, Tracer.Span>()

  constructor(
    private readonly tracer: Tracer.Tracer,
    private readonly parent: Option.Option<Tracer.AnySpan>
  ) {}

  ended(turn: EndedTurn): void {
    const span = this.tracer.span("callgate.turn", this.parent, Context.empty(), [], spanTime(turn.endedAtMs), "internal")
    span.attribute("callgate.turn.index", turn.index)
    span.attribute("callgate.turn.input", turn.input)
    span.attribute("callgate.turn.caller_ended_at", isoAt(frameTimeToEpochMs(turn.endedAtMs)))
    this.open.set(turn.index, span)
  }

  /** The agent answered; `awaitPlayout`: the span stays open until `played` or `notPlayed`. */
  answered(turn: AnsweredTurn, timeoutOccurrences: number, awaitPlayout: boolean): void {
    const span = this.open.get(turn.index)
    if (span === undefined) return
    span.attribute("callgate.turn.latency_ms", Math.round(turn.latencyMs))
    span.attribute("callgate.turn.timeout_occurrences", timeoutOccurrences)
    span.attribute("callgate.turn.agent_responded_at", isoAt(frameTimeToEpochMs(turn.respondedAtMs)))
    if (!awaitPlayout) this.finish(turn.index, "answered", turn.respondedAtMs)
  }

  /** The caller heard the answer's start at `playedAtMs`. */
  played(index: number, playedLatencyMs: number, playedAtMs: number): void {
    const span = this.open.get(index)
    if (span === undefined) return
    span.attribute("callgate.turn.played_latency_ms", Math.round(playedLatencyMs))
    span.attribute("callgate.turn.played_at", isoAt(frameTimeToEpochMs(playedAtMs)))
    this.finish(index, "played", playedAtMs)
  }

  /** The answer was cleared before the carrier confirmed it was played. */
  notPlayed(index: number, atMs: number): void {
    this.finish(index, "not_played", atMs)
  }

  superseded(index: number, atMs: number, timeoutOccurrences: number): void {
    this.open.get(index)?.attribute("callgate.turn.timeout_occurrences", timeoutOccurrences)
    this.finish(index, "superseded", atMs)
  }

  /** The call ended: every turn still open ends now. */
  close(atMs: number): void {
    for (const index of [...this.open.keys()]) this.finish(index, "call_ended", atMs)
  }

  private finish(index: number, outcome: string, atMs: number): void {
    const span = this.open.get(index)
    if (span === undefined) return
    this.open.delete(index)
    span.attribute("callgate.turn.outcome", outcome)
    span.end(spanTime(Math.max(atMs, 0)), Exit.void)
  }
}

/** A call's turn spans on `tracer`, under `parent`; none where spans do not leave the process (see TurnSpans). */
export const turnSpansOn = (tracer: Tracer.Tracer, parent: Option.Option<Tracer.AnySpan>): Pick<TurnSpans, keyof TurnSpans> =>
  spansLeave(tracer) ? new TurnSpans(tracer, parent) : noTurnSpans

/** Turn spans that are not made (tracing off). */
export const noTurnSpans: Pick<TurnSpans, keyof TurnSpans> = {
  ended: () => {},
  answered: () => {},
  played: () => {},
  notPlayed: () => {},
  superseded: () => {},
  close: () => {}
}
