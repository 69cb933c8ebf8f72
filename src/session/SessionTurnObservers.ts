import { Effect, Fiber, Layer, Runtime } from "effect"
import { addScopeFinalizer, whileRunning } from "../kernel/SessionFibers.js"
import { describeNoResponseTrip } from "../breaker/ResponseWatchdog.js"
import { HardError } from "../kernel/HardError.js"
import { Sessions } from "./Sessions.js"
import { TurnObservers } from "./TurnObservers.js"
import type { TurnRecord } from "../turns/TurnRecord.js"
import { TurnTiming } from "../turns/TurnTiming.js"

/**
 * Puts turn timing on every call: each session gets a TurnTiming watch (voice activity, turn
 * tracker, response watchdog, breaker). A breaker trip fails the session with
 * `agent_unresponsive`, which runs the error fallback. The session's stored `turns` follow the
 * call: one store write per changed turn, never more than one in flight, off the media path.
 */
export const SessionTurnObserversLive = Layer.effect(
  TurnObservers,
  Effect.gen(function* () {
    const timing = yield* TurnTiming
    const sessions = yield* Sessions

    return TurnObservers.of({
      forSession: (info, control) =>
        Effect.gen(function* () {
          // The session's turn writes run on the session's runtime, one at a time, each in a fiber
          // of its own (no fiber waits between them); one still running when the session's scope
          // closes is interrupted.
          const runtime = yield* Effect.runtime<never>()
          const fork = Runtime.runFork(runtime)
          let turns: () => ReadonlyArray<TurnRecord> = () => []
          let writing: Fiber.RuntimeFiber<void> | undefined
          let busy = false
          let pending = false
          yield* addScopeFinalizer(Effect.suspend(() => (writing === undefined ? Effect.void : Fiber.interrupt(writing))))
          const written = () => {
            writing = undefined
            busy = false
            if (pending) {
              pending = false
              persist()
            }
          }
          const persist = (): void => {
            if (busy) {
              pending = true
              return
            }
            busy = true
            // The embedded store writes at once: the fiber may have finished (and the next begun) already.
            const fiber = fork(
              sessions
                .update(info.agentId, info.sessionId, (current) =>
                  // A session already closed keeps the turns its ending recorded.
                  current.status === "active" ? { ...current, turns: [...turns()] } : current
                )
                .pipe(Effect.ignore, Effect.ensuring(Effect.sync(written)))
            )
            // Not `writing = whileRunning(fiber)`: a write that finished at once may have begun the next one.
            if (whileRunning(fiber) !== undefined) writing = fiber
          }
          const watched = yield* timing.watchCall({
            agentId: info.agentId,
            environmentId: info.environmentId,
            sessionId: info.sessionId,
            runtime,
            onTrip: (trip) => void control.fail(new HardError({ kind: "agent_unresponsive", message: describeNoResponseTrip(trip) })),
            onTurnsChanged: persist
          })
          turns = watched.turns
          return { observer: watched.observer, turns: watched.turns }
        })
    })
  })
)
