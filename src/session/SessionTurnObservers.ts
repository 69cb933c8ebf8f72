import { Effect, FiberSet, Layer } from "effect"
import { describeNoResponseTrip } from "../breaker/ResponseWatchdog.js"
import { HardError } from "../core/HardError.js"
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
          // The session's turn writes run in the session's scope: interrupted, if still running, when it closes.
          const fork = yield* FiberSet.makeRuntime<never>()
          let turns: () => ReadonlyArray<TurnRecord> = () => []
          let writing = false
          let pending = false
          const persist = (): void => {
            if (writing) {
              pending = true
              return
            }
            writing = true
            fork(
              sessions
                .update(info.agentId, info.sessionId, (current) =>
                  // A session already closed keeps the turns its ending recorded.
                  current.status === "active" ? { ...current, turns: [...turns()] } : current
                )
                .pipe(
                  Effect.ignore,
                  Effect.ensuring(
                    Effect.sync(() => {
                      writing = false
                      if (pending) {
                        pending = false
                        persist()
                      }
                    })
                  )
                )
            )
          }
          const watched = yield* timing.watchCall({
            agentId: info.agentId,
            environmentId: info.environmentId,
            sessionId: info.sessionId,
            onTrip: (trip) => void control.fail(new HardError({ kind: "agent_unresponsive", message: describeNoResponseTrip(trip) })),
            onTurnsChanged: persist
          })
          turns = watched.turns
          return { observer: watched.observer, turns: watched.turns }
        })
    })
  })
)
