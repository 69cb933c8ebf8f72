import { Deferred, Effect, FiberId, Option } from "effect"
import type { Checkpoint } from "../kernel/CallLegs.js"
import type { CallFork } from "../kernel/SessionFibers.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"
import { SessionStore } from "../sessions/SessionStore.js"

/** A live call's checkpoints: what its agents send, kept with the session (docs/calls.md, "Checkpoints"). */
export interface CheckpointKeeper {
  /** Keeps an agent's checkpoint; synchronous and returns at once (the store write happens off the media path). */
  readonly keep: (checkpoint: Checkpoint) => void
  /**
   * The session's latest checkpoint, for the agent that takes the call over (`resume`): the last one
   * kept on this call, else the store's (the call came from another instance); null when there is none.
   */
  readonly latest: Effect.Effect<Checkpoint | null>
  /** Waits until every checkpoint kept so far is in the store (before the call moves to another instance). */
  readonly written: Effect.Effect<void>
}

/** No keeper (before the call's is made): checkpoints are dropped, none is known. */
export const noCheckpoints: CheckpointKeeper = { keep: () => {}, latest: Effect.succeed(null), written: Effect.void }

/**
 * The agents' checkpoints of live calls, kept with the session in the store. Per call: one write in
 * flight at most, on a fiber of the call's (`fork`, as CallTurns writes turns),
 * and of the checkpoints that arrive meanwhile only the newest waits: latest wins, and a call holds
 * at most two checkpoints (the one being written, the one waiting). A write that fails is logged and
 * the call goes on; the next checkpoint replaces it anyway.
 */
export class CallCheckpoints extends Effect.Service<CallCheckpoints>()("callgate/CallCheckpoints", {
  effect: Effect.gen(function* () {
    const sessions = yield* SessionStore

    /** The call's keeper; its writes run on the call's fibers (`fork`): one still running when the call ends is interrupted. */
    const keeper = (info: SessionInfo, fork: CallFork): Effect.Effect<CheckpointKeeper> =>
      Effect.sync(() => {
        let last: Checkpoint | undefined
        let pending: Checkpoint | undefined
        /** Set while a write is in flight; done when the keeper is idle again. */
        let idle: Deferred.Deferred<void> | undefined
        const write = (checkpoint: Checkpoint): void => {
          fork(
            sessions.saveCheckpoint(info.agentId, info.sessionId, checkpoint).pipe(
              Effect.catchAll((error) => Effect.logWarning("an agent checkpoint could not be stored", error)),
              Effect.ensuring(Effect.sync(written))
            )
          )
        }
        const written = () => {
          const next = pending
          pending = undefined
          if (next !== undefined) return write(next)
          const waiting = idle
          idle = undefined
          if (waiting !== undefined) Deferred.unsafeDone(waiting, Effect.void)
        }
        return {
          keep: (checkpoint) => {
            last = checkpoint
            if (idle !== undefined) {
              pending = checkpoint
              return
            }
            idle = Deferred.unsafeMake<void>(FiberId.none)
            write(checkpoint)
          },
          latest: Effect.suspend(() =>
            last !== undefined
              ? Effect.succeed(last)
              : sessions.checkpointOf(info.agentId, info.sessionId).pipe(
                  Effect.map(Option.getOrNull),
                  Effect.catchAll((error) => Effect.as(Effect.logWarning("the session's checkpoint could not be read", error), null))
                )
          ),
          written: Effect.suspend(() => (idle === undefined ? Effect.void : Deferred.await(idle)))
        } satisfies CheckpointKeeper
      })

    return { keeper } as const
  })
}) {}
