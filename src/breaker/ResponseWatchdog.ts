import { Effect, Fiber, type Scope } from "effect"
import { addScopeFinalizer, type CallFork, makeCallFork, whileRunning } from "../kernel/SessionFibers.js"
import { Breaker, type BreakerSettings, type SessionRef } from "./Breaker.js"
import type { BreakerTrip } from "./BreakerStore.js"

/**
 * The per-session response timer of docs/turns-and-breaker.md ("Breaker rules"), on the Effect Clock (so TestClock drives it):
 *
 * - A caller turn ends: the agent has `errorFallbackTimeout` seconds from the caller's last voiced
 *   frame to begin answering. Timeout 0: nothing is timed (the trigger is off).
 * - The deadline passes and the agent is still silent: one occurrence is recorded for the
 *   environment, keyed by this session, and the timer re-arms; each later expiry refreshes the
 *   session's occurrence (it never counts twice). Below the threshold the call keeps waiting.
 * - The count reaches the threshold: the breaker publishes a trip (Breaker.subscribeTrips). The
 *   watchdog does not act on trips itself: the session's owner holds the subscription
 *   (livecall/LiveCall.ts) and asks `rescuedBy`: a trip of the environment (from this session or
 *   any other, on any instance) rescues this session when its agent is past its first deadline for
 *   the current turn.
 * - A voiced answer stops the timer and clears the environment's occurrences; new caller speech
 *   stops it until that turn ends.
 *
 * Settings are read before every evaluation (arming, and each expiry), so /v1 changes apply to the
 * next one; if they cannot be read, the last ones read are used.
 *
 * The methods below are synchronous and cheap: the turn tracker calls them on the media path.
 * Store calls happen on the watchdog's own fiber, never on the media path.
 */

export interface NoResponseTrip {
  /** `threshold`: this session's occurrence reached the threshold; `environment`: another session's did, and this one was stalled too. */
  readonly reason: "threshold" | "environment"
  readonly count: number
  readonly threshold: number
  /** The session whose occurrence tripped the breaker. */
  readonly trippedBy: string
  /** This session's response timeout when it was rescued, seconds. */
  readonly timeoutSeconds: number
}

/** A sentence for the session's error (it becomes the fallback webhook's ErrorMessage): no ids, no secrets. */
export const describeNoResponseTrip = (trip: NoResponseTrip): string =>
  `The agent did not begin responding within ${trip.timeoutSeconds} s of the caller's input: ` +
  `${trip.count} no-response occurrence${trip.count === 1 ? "" : "s"} in the environment's time window reached the threshold of ${trip.threshold}.`

export interface OccurrenceRecorded {
  /** When the deadline was due and when the occurrence was recorded, Clock ms. */
  readonly deadlineMs: number
  readonly recordedAtMs: number
  readonly count: number
}

export interface WatchdogOptions {
  readonly session: SessionRef
  /** The environment's current settings; read before every evaluation. */
  readonly settings: Effect.Effect<BreakerSettings, unknown>
  /**
   * True while the agent is producing voiced audio not yet long enough to count as an answer; an
   * expiring deadline then waits (a frame at a time) for the verdict instead of counting.
   */
  readonly agentStarting?: () => boolean
  /** The call's fork, for the watchdog's fibers (default: a fork of its own, in the scope it is started in). */
  readonly fork?: CallFork
  /** Observes each recorded occurrence (tests, benchmarks). */
  readonly onOccurrence?: (occurrence: OccurrenceRecorded) => void
}

export interface ResponseWatchdog {
  /** The caller's turn ended at `endedAtMs`, recognised at `detectedAtMs` (same clock, any origin: only the difference is used). */
  turnEnded(endedAtMs: number, detectedAtMs: number): void
  /** The caller spoke again before the agent answered. */
  callerResumed(): void
  /** The agent began a voiced answer. */
  agentResponded(): void
  /** The session ended: stop timing (idempotent; the watchdog's fiber ends with its scope). */
  stop(): void
  /**
   * Whether `trip` (of this environment, from any session) rescues this session: its agent is
   * silent past the first deadline of the current turn. Yes stops the watchdog (once).
   */
  rescuedBy(trip: BreakerTrip): NoResponseTrip | undefined
  /**
   * Succeeds once the watchdog has nothing to do until the next event or the clock reaching its
   * next deadline: no evaluation runs (or it waits on the clock) and no alarm is due. What a test
   * waits for after moving the TestClock.
   */
  readonly idle: Effect.Effect<void>
  /** Occurrences recorded since the last turn ended. */
  readonly occurrences: number
  readonly rescued: boolean
}

/** An expiring deadline waits for the verdict on agent audio that has just started, a frame at a time... */
const VERDICT_POLL_MS = 20
/** ...but not for ever (an agent stream that stops mid-frame-run never settles). */
const MAX_VERDICT_POLLS = 25

/**
 * A session's watchdog is a plain object while nothing needs doing, which is most of a call: no
 * fiber of its own waits for events (docs/design.md, "Per-call state"). An event, an alarm or a
 * trip heard wakes it: a fiber is forked from the session's runtime (so the session's Clock,
 * logger and supervisor apply) and evaluates (`step`) until nothing is left to do but wait, then
 * ends. At most one such fiber runs per session, so evaluations never overlap; a wake-up while one
 * runs is kept (one, as a token) and makes it evaluate again before it ends. The alarm is a
 * sleeping fiber, forked the same way, only while a deadline is timed. Both are interrupted when
 * the session's scope closes.
 */
export const startResponseWatchdog = (options: WatchdogOptions): Effect.Effect<ResponseWatchdog, never, Breaker | Scope.Scope> =>
  Effect.flatMap(Breaker, (breaker) => makeResponseWatchdog(breaker, options))

/**
 * startResponseWatchdog with the breaker given: a session's watchdog is built in the session's
 * own context, not in a copy of it with the breaker added, which its fibers would then keep.
 */
export const makeResponseWatchdog = (breaker: Breaker, options: WatchdogOptions): Effect.Effect<ResponseWatchdog, never, Scope.Scope> =>
  Effect.gen(function* () {
    const clock = yield* Effect.clock
    const { agentId, environmentId, sessionId } = options.session
    // Its fibers are forked on the session's runtime (the session's Clock, logger with the
    // session's annotations) into the session's scope: closing it interrupts whatever still runs.
    const fork = options.fork ?? (yield* makeCallFork)

    const state = {
      awaiting: false,
      /** Bumped by every event, so an evaluation can tell that the turn it was timing is over. */
      generation: 0,
      armedGeneration: -1,
      turnEndAt: 0,
      deadline: Infinity,
      firstDeadline: Infinity,
      clearPending: false,
      rescued: false,
      /** The session ended: nothing is timed any more. */
      stopped: false,
      /** The evaluations failed (logged once): the watchdog no longer runs. */
      broken: false,
      occurrences: 0,
      verdictPolls: 0,
      /** A wake-up not yet taken by an evaluation. */
      woken: false
    }

    let settings: BreakerSettings = { timeoutSeconds: 0, threshold: 1, windowSeconds: 60 }
    const loadSettings = options.settings.pipe(
      Effect.tap((fresh) => Effect.sync(() => (settings = fresh))),
      Effect.catchAllCause(() => Effect.sync(() => settings))
    )

    /** The deadline passed: one occurrence (or, while the agent's audio is just starting, a short wait for its verdict). */
    const expire = Effect.gen(function* () {
      if (state.verdictPolls < MAX_VERDICT_POLLS && options.agentStarting?.() === true) {
        state.verdictPolls++
        waitingUntil = clock.unsafeCurrentTimeMillis() + VERDICT_POLL_MS
        notifyIdle()
        yield* Effect.sleep(VERDICT_POLL_MS)
        waitingUntil = -Infinity
        return
      }
      state.verdictPolls = 0
      const generation = state.generation
      const fresh = yield* loadSettings
      if (generation !== state.generation || !state.awaiting) return
      if (fresh.timeoutSeconds <= 0) {
        state.deadline = Infinity
        return
      }
      const deadline = state.deadline
      // Counted before the store answers: a trip this occurrence causes is heard (and the call
      // ended, its turns closed) while recordTimeout still publishes it.
      state.occurrences++
      const outcome = yield* breaker.recordTimeout(options.session, fresh)
      options.onOccurrence?.({ deadlineMs: deadline, recordedAtMs: clock.unsafeCurrentTimeMillis(), count: outcome.count })
      // An answer that arrived while the occurrence was being recorded wins for this session. A
      // trip was heard by the session's owner, which asked `rescuedBy` (the evaluation ends here).
      if (generation !== state.generation || !state.awaiting) return
      state.deadline = deadline + fresh.timeoutSeconds * 1000
    })

    /** One evaluation; true when nothing is left to do until the next wake-up. */
    const step = Effect.gen(function* () {
      if (state.clearPending) {
        state.clearPending = false
        yield* breaker.recordResponse(agentId, environmentId)
      }
      if (!state.awaiting) return yield* Effect.as(cancelAlarm, true)
      if (state.armedGeneration !== state.generation) {
        const generation = state.generation
        const fresh = yield* loadSettings
        if (generation !== state.generation) return false
        state.armedGeneration = generation
        state.deadline = fresh.timeoutSeconds > 0 ? state.turnEndAt + fresh.timeoutSeconds * 1000 : Infinity
        state.firstDeadline = state.deadline
      }
      if (state.deadline === Infinity) return yield* Effect.as(cancelAlarm, true)
      // Wait for the deadline or an event, whichever comes first; then evaluate afresh.
      if (state.deadline > clock.unsafeCurrentTimeMillis()) return yield* Effect.as(alarmAt(state.deadline), true)
      yield* expire
      return false
    })

    // The evaluating fiber: steps until one leaves nothing to do and no wake-up is waiting.
    let evaluating: Fiber.RuntimeFiber<void> | undefined
    const evaluate: Effect.Effect<void, unknown> = Effect.suspend(() => {
      if (state.rescued || state.stopped) return Effect.void
      state.woken = false
      return Effect.flatMap(step, (idle) => (idle && !state.woken ? Effect.void : evaluate))
    })
    const evaluation: Effect.Effect<void> = evaluate.pipe(
      Effect.catchAllCause((cause) =>
        Effect.zipRight(
          Effect.sync(() => void (state.broken = true)),
          Effect.logError("response watchdog stopped", { agentId, environmentId, sessionId }, cause)
        )
      ),
      // Ended (or cut): the alarm of a watchdog that no longer evaluates has nothing to wake.
      Effect.ensuring(
        Effect.suspend(() => {
          running = false
          evaluating = undefined
          return state.rescued || state.stopped || state.broken ? cancelAlarm : Effect.void
        }).pipe(Effect.ensuring(Effect.sync(() => notifyIdle())))
      )
    )
    // A forked fiber runs at once, up to its first wait, and may even finish before `fork` returns.
    let running = false
    /** While the evaluation sleeps on the clock for an agent's verdict: until when (Clock ms). */
    let waitingUntil = -Infinity
    let idleWaiters: Array<() => void> | undefined
    const isIdle = () => {
      const now = clock.unsafeCurrentTimeMillis()
      return (!running || waitingUntil > now) && !(alarm !== undefined && alarmDueMs <= now)
    }
    const notifyIdle = () => {
      if (idleWaiters === undefined || !isIdle()) return
      const waiters = idleWaiters
      idleWaiters = undefined
      for (const resume of waiters) resume()
    }
    const idle = Effect.async<void>((resume) => {
      if (isIdle()) return resume(Effect.void)
      ;(idleWaiters ??= []).push(() => resume(Effect.void))
    })
    const wake = () => {
      state.woken = true
      if (running || state.broken || state.rescued || state.stopped) return
      running = true
      evaluating = whileRunning(fork(evaluation))
    }

    // The alarm: at most one sleeping fiber, which wakes the watchdog when its time comes. An
    // alarm already due no later than the deadline is kept (the watchdog, woken early, sets the
    // next one); a later one is replaced; nothing left to time cancels it.
    let alarm: Fiber.RuntimeFiber<void> | undefined
    let alarmDueMs = Infinity
    const alarmAt = (dueMs: number): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (alarm !== undefined && alarmDueMs <= dueMs) return Effect.void
        const previous = alarm
        alarmDueMs = dueMs
        const ring = Effect.sleep(Math.max(0, dueMs - clock.unsafeCurrentTimeMillis())).pipe(
          Effect.zipRight(
            Effect.sync(() => {
              alarm = undefined
              alarmDueMs = Infinity
              wake()
              notifyIdle()
            })
          )
        )
        return (previous === undefined ? Effect.void : Fiber.interrupt(previous)).pipe(
          // An alarm already due may have rung (and cleared itself) before `fork` returned.
          Effect.map(() => void (alarm = whileRunning(fork(ring))))
        )
      })

    /** Forgets the alarm; returns its fiber, for the caller to interrupt. */
    const dropAlarm = () => {
      const ringing = alarm
      alarm = undefined
      alarmDueMs = Infinity
      return ringing
    }
    const cancelAlarm: Effect.Effect<void> = Effect.suspend(() => {
      const ringing = dropAlarm()
      return ringing === undefined ? Effect.void : Fiber.interrupt(ringing)
    })

    // The session's scope closes: whatever still runs for this watchdog stops with it.
    yield* addScopeFinalizer(
      Effect.suspend(() => {
        state.stopped = true
        const current = evaluating
        return Effect.zipRight(current === undefined ? Effect.void : Fiber.interrupt(current), cancelAlarm)
      })
    )

    const nextGeneration = () => {
      state.generation++
      state.firstDeadline = Infinity
      state.deadline = Infinity
      state.verdictPolls = 0
    }

    return {
      turnEnded: (endedAtMs: number, detectedAtMs: number) => {
        if (state.rescued) return
        nextGeneration()
        state.awaiting = true
        state.occurrences = 0
        state.turnEndAt = clock.unsafeCurrentTimeMillis() - Math.max(0, detectedAtMs - endedAtMs)
        wake()
      },
      callerResumed: () => {
        if (state.rescued || !state.awaiting) return
        nextGeneration()
        state.awaiting = false
        wake()
      },
      agentResponded: () => {
        if (state.rescued) return
        nextGeneration()
        state.awaiting = false
        state.clearPending = true
        wake()
      },
      stop: () => {
        if (state.stopped) return
        state.stopped = true
        state.awaiting = false
        nextGeneration()
        // Nothing is timed any more: the alarm goes (the evaluating fiber, if any, ends at its next step).
        const ringing = dropAlarm()
        ringing?.unsafeInterruptAsFork(ringing.id())
      },
      rescuedBy: (trip: BreakerTrip): NoResponseTrip | undefined => {
        if (state.rescued || state.stopped || !state.awaiting || clock.unsafeCurrentTimeMillis() < state.firstDeadline) return undefined
        state.rescued = true
        state.awaiting = false
        const ringing = dropAlarm()
        ringing?.unsafeInterruptAsFork(ringing.id())
        return {
          reason: trip.sessionId === sessionId ? "threshold" : "environment",
          count: trip.count,
          threshold: trip.threshold,
          trippedBy: trip.sessionId,
          timeoutSeconds: settings.timeoutSeconds
        }
      },
      idle,
      get occurrences() {
        return state.occurrences
      },
      get rescued() {
        return state.rescued
      }
    } satisfies ResponseWatchdog
  })
