import { Effect, type Scope } from "effect"
import type { BreakerTrip } from "../breaker/BreakerStore.js"
import type { NoResponseTrip } from "../breaker/ResponseWatchdog.js"
import type { CallFork } from "../kernel/SessionFibers.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"
import { Sessions } from "../sessions/Sessions.js"
import { nullTurnObserver, type TurnObserver } from "../turns/TurnObserver.js"
import type { TurnRecord } from "../turns/TurnRecord.js"
import { TurnTiming } from "../turns/TurnTiming.js"

/** A live call's turn watch: the observer its relay feeds, its turns, and its answer to a breaker trip. */
export interface TurnWatch {
  readonly observer: TurnObserver
  readonly turns: () => ReadonlyArray<TurnRecord>
  /** Whether a trip of the environment rescues this call (its agent is silent past its first deadline). */
  readonly rescuedBy: (trip: BreakerTrip) => NoResponseTrip | undefined
}

/** No turn watch (before it is made, or when it could not be). */
export const unwatched: TurnWatch = { observer: nullTurnObserver, turns: () => [], rescuedBy: () => undefined }

/**
 * Turn timing on every live call: each call gets a TurnTiming watch (voice activity, turn tracker,
 * response watchdog). The call's stored `turns` follow the call: one store write per changed turn,
 * never more than one in flight, off the media path. The breaker's trips do not come through
 * here: the call holds its own subscription and asks the watch (`rescuedBy`).
 */
export class CallTurns extends Effect.Service<CallTurns>()("callgate/CallTurns", {
  effect: Effect.gen(function* () {
    const timing = yield* TurnTiming
    const sessions = yield* Sessions

    /** The call's watch, in the call's scope; a watch that cannot be made leaves the call unobserved (logged). */
    const watch = (
      info: SessionInfo,
      fork: CallFork,
      hooks: {
        readonly onMissedDeadline?: (inARow: number) => void
        /** The call's turns as its record keeps them (a session moved here: with the turns before it came); default the watch's. */
        readonly recorded?: () => ReadonlyArray<TurnRecord>
      } = {}
    ): Effect.Effect<TurnWatch, never, Scope.Scope> =>
      Effect.gen(function* () {
        // The call's turn writes run on the call's fibers, one at a time, each in a fiber of its
        // own (no fiber waits between them).
        let turns: () => ReadonlyArray<TurnRecord> = () => []
        let busy = false
        let pending = false
        const written = () => {
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
          // A write still running when the call's scope closes is interrupted.
          fork(
            sessions
              .update(info.agentId, info.sessionId, (current) =>
                // A session already closed keeps the turns its ending recorded.
                current.status === "active" ? { ...current, turns: [...(hooks.recorded ?? turns)()] } : current
              )
              .pipe(Effect.ignore, Effect.ensuring(Effect.sync(written)))
          )
        }
        const watched = yield* timing.watchCall({
          agentId: info.agentId,
          environmentId: info.environmentId,
          sessionId: info.sessionId,
          fork,
          onTurnsChanged: persist,
          ...(hooks.onMissedDeadline !== undefined ? { onMissedDeadline: hooks.onMissedDeadline } : {})
        })
        turns = watched.turns
        return { observer: watched.observer, turns: watched.turns, rescuedBy: watched.rescuedBy } satisfies TurnWatch
      }).pipe(
        Effect.catchAllCause((cause) =>
          Effect.as(Effect.logError("the turn watch could not be created; the call goes on unobserved", cause), unwatched)
        )
      )

    return { watch } as const
  })
}) {}
