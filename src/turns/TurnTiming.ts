import { Effect, type Scope } from "effect"
import { Breaker, type BreakerSettings } from "../breaker/Breaker.js"
import { BreakerMetrics } from "../breaker/BreakerMetrics.js"
import type { BreakerTrip } from "../breaker/BreakerStore.js"
import { addScopeFinalizer, type CallFork, makeCallFork } from "../kernel/SessionFibers.js"
import { type OccurrenceRecorded, type NoResponseTrip, makeResponseWatchdog } from "../breaker/ResponseWatchdog.js"
import type { TurnObserver } from "./TurnObserver.js"
import type { TurnRecord } from "./TurnRecord.js"
import { PlayoutMarks } from "./PlayoutMarks.js"
import { turnSpansOn } from "./TurnSpans.js"
import { TurnTracker } from "./TurnTracker.js"
import { VoiceActivity } from "./VoiceActivity.js"
import { frameTimeToEpochMs, isoAt } from "../kernel/Time.js"

export interface WatchCallOptions {
  readonly agentId: string
  readonly environmentId: string
  readonly sessionId: string
  /** The environment's breaker settings; defaults to reading the environment afresh each evaluation. */
  readonly settings?: Effect.Effect<BreakerSettings, unknown>
  readonly onOccurrence?: (occurrence: OccurrenceRecorded) => void
  /**
   * The agent missed a response deadline (each expiry, recorded as an occurrence): how many in a
   * row since its last voiced answer (or since it took the call). Called on the watchdog's fiber.
   */
  readonly onMissedDeadline?: (inARow: number) => void
  /** The call's fork, for the watch's fibers (default: a fork of the watch's own, in the scope watchCall runs in). */
  readonly fork?: CallFork
  /**
   * Called (synchronously, on the media path: keep it cheap) after a turn is added or updated; for
   * an answer, once the caller heard it begin or it was cut (the answer and its playout together).
   */
  readonly onTurnsChanged?: () => void
}

export interface WatchedCall {
  /** Feed every frame, digit and the end of the call here (the relay's TurnObserver hook). */
  readonly observer: TurnObserver
  /** The call's turns so far, oldest first (at most the last 500). */
  readonly turns: () => ReadonlyArray<TurnRecord>
  /** Whether a breaker trip rescues this call (ResponseWatchdog.rescuedBy); asked by the call's owner. */
  readonly rescuedBy: (trip: BreakerTrip) => NoResponseTrip | undefined
  /** The response watchdog has nothing to do until the next event or deadline (ResponseWatchdog.idle). */
  readonly idle: Effect.Effect<void>
}

const MAX_TURNS = 500

/** The relay stamps frames with performance.now(); records carry wall-clock ISO times. */
const frameIso = (atMs: number) => isoAt(frameTimeToEpochMs(atMs))

/**
 * Turn timing for one call: two voice detectors, the turn tracker on the media path, and the
 * response watchdog behind it, wired together; latencies go to the session's turn list and to
 * `callgate_agent_response_latency_seconds`. Everything is released when the scope closes.
 */
export class TurnTiming extends Effect.Service<TurnTiming>()("callgate/TurnTiming", {
  effect: Effect.gen(function* () {
    const vad = yield* VoiceActivity
    const breaker = yield* Breaker
    const metrics = yield* BreakerMetrics

    const watchCall = (options: WatchCallOptions): Effect.Effect<WatchedCall, never, Scope.Scope> =>
      Effect.gen(function* () {
        const { agentId, environmentId, sessionId } = options
        const fork = options.fork ?? (yield* makeCallFork)
        // Each turn a span under the current one (the session's).
        const spans = turnSpansOn(yield* Effect.tracer, yield* Effect.option(Effect.currentSpan))
        const records: Array<TurnRecord> = []
        let tracker: TurnTracker | undefined
        /** Deadlines missed since the agent's last voiced answer (or since it took the call). */
        let missedInARow = 0

        const watchdog = yield* makeResponseWatchdog(breaker, {
          session: { agentId, environmentId, sessionId },
          settings: options.settings ?? breaker.settingsFor(agentId, environmentId),
          fork,
          agentStarting: () => tracker?.agentStarting === true,
          onOccurrence: (occurrence) => {
            missedInARow++
            options.onOccurrence?.(occurrence)
            options.onMissedDeadline?.(missedInARow)
          }
        })

        const update = (index: number, change: (record: TurnRecord) => TurnRecord) => {
          for (let i = records.length - 1; i >= 0; i--) {
            if (records[i]!.index === index) {
              records[i] = change(records[i]!)
              return
            }
          }
        }

        const playout = new PlayoutMarks({
          onPlayed: (index, playedAtMs, playedLatencyMs) => {
            update(index, (record) => ({ ...record, playedLatencyMs: Math.round(playedLatencyMs) }))
            metrics.observePlayedLatency(agentId, environmentId, playedLatencyMs)
            spans.played(index, playedLatencyMs, playedAtMs)
            options.onTurnsChanged?.()
          },
          onNotPlayed: (index, atMs) => {
            spans.notPlayed(index, atMs)
            // The answer's record waited for its playout (onAgentResponded): it is written now.
            options.onTurnsChanged?.()
          }
        })

        const caller = vad.detector()
        const agent = yield* Effect.sync(() => vad.detector()).pipe(Effect.tapDefect(() => Effect.sync(() => caller.close())))
        tracker = new TurnTracker({
          caller,
          agent,
          minSpeechMs: vad.settings.minSpeechMs,
          agentMinSpeechMs: vad.settings.agentMinSpeechMs,
          turnEndSilenceMs: vad.settings.turnEndSilenceMs,
          onTurnEnded: (turn) => {
            records.push({
              index: turn.index,
              input: turn.input,
              callerEndedAt: frameIso(turn.endedAtMs),
              agentRespondedAt: null,
              latencyMs: null,
              playedLatencyMs: null,
              timeoutOccurrences: 0
            })
            if (records.length > MAX_TURNS) records.shift()
            spans.ended(turn)
            // Without an agent (a failover), the answer is timed once the next agent has the call.
            if (tracker?.agentIsAway !== true) watchdog.turnEnded(turn.endedAtMs, turn.detectedAtMs)
            options.onTurnsChanged?.()
          },
          onCallerResumed: (turn, atMs) => {
            const occurrences = watchdog.occurrences
            update(turn.index, (record) => ({ ...record, timeoutOccurrences: occurrences }))
            spans.superseded(turn.index, atMs, occurrences)
            watchdog.callerResumed()
          },
          onAgentResponded: (turn) => {
            const occurrences = watchdog.occurrences
            update(turn.index, (record) => ({
              ...record,
              agentRespondedAt: frameIso(turn.respondedAtMs),
              latencyMs: Math.round(turn.latencyMs),
              timeoutOccurrences: occurrences
            }))
            metrics.observeResponseLatency(agentId, environmentId, turn.latencyMs)
            spans.answered(turn, occurrences, true)
            // callgate's playout mark follows this frame: the record is written once the carrier
            // echoes it (onPlayed) or the answer is cut (onNotPlayed), one write for the answer
            // and its playout, as many per turn as before latency at playout.
            playout.answered(turn)
            missedInARow = 0
            watchdog.agentResponded()
          },
          onCallbackError: (error) =>
            void fork(Effect.logError("turn tracking callback failed", { agentId, environmentId, sessionId }, error))
        })
        const calls = tracker
        let closed = false
        // Closing is synchronous (the relay closes its observer when the session ends): the pending
        // turn gets its final occurrence count, the watchdog stops timing, the detectors are freed.
        const close = () => {
          if (closed) return
          closed = true
          const pending = calls.pendingTurn
          if (pending !== undefined) {
            const occurrences = watchdog.occurrences
            update(pending.index, (record) => ({ ...record, timeoutOccurrences: occurrences }))
          }
          watchdog.stop()
          calls.close()
          playout.close()
          spans.close(performance.now())
        }
        yield* addScopeFinalizer(Effect.sync(close))
        const observer: TurnObserver = {
          callerAudio: (frame, atMs) => calls.callerAudio(frame, atMs),
          callerDtmf: (digit, atMs) => calls.callerDtmf(digit, atMs),
          agentAudio: (frame, atMs) => calls.agentAudio(frame, atMs),
          takeMark: () => playout.take(),
          playoutMarkEchoed: (name, atMs) => playout.echoed(name, atMs),
          agentClear: (atMs) => playout.cleared(atMs),
          agentAway: (atMs) => {
            calls.agentAway(atMs)
            // Nothing is timed while no agent can answer (as when the caller speaks again).
            watchdog.callerResumed()
            playout.cleared(atMs)
          },
          agentBack: (atMs) => {
            missedInARow = 0
            const waiting = calls.agentBack(atMs)
            if (waiting !== undefined) watchdog.turnEnded(waiting.endedAtMs, waiting.detectedAtMs)
          },
          close
        }
        return { observer, turns: () => records, rescuedBy: watchdog.rescuedBy, idle: watchdog.idle } satisfies WatchedCall
      })

    return { watchCall, settings: vad.settings } as const
  })
}) {}
