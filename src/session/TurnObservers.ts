import { Context, Effect } from "effect"
import { nullTurnObserver, type TurnObserver } from "../turns/TurnObserver.js"
import type { TurnRecord } from "../turns/TurnRecord.js"
import type { HardError } from "../core/HardError.js"
import type { SessionInfo } from "../core/SessionInfo.js"

/** What an observer may do to its session: fail it (returns true when this decided the ending). */
export interface SessionControl {
  readonly fail: (error: HardError) => boolean
}

/** A session's observer, and the turns it has seen so far (stored on the session when it ends). */
export interface ObservedSession {
  readonly observer: TurnObserver
  readonly turns: () => ReadonlyArray<TurnRecord>
}

export interface TurnObserversShape {
  /**
   * The observer of one session, asked for once when its stream starts (before the agent is
   * connected). The relay then calls it synchronously for every caller frame, DTMF digit and
   * agent frame, and calls `close` once when the session ends.
   */
  readonly forSession: (session: SessionInfo, control: SessionControl) => Effect.Effect<ObservedSession>
}

export const unobserved: ObservedSession = { observer: nullTurnObserver, turns: () => [] }

/**
 * The hook the turn tracker plugs into: provide a layer for this tag (in src/main.ts) to observe
 * every call. Without one, sessions use the null observer.
 */
export class TurnObservers extends Context.Reference<TurnObservers>()("callgate/TurnObservers", {
  defaultValue: (): TurnObserversShape => ({ forSession: () => Effect.succeed(unobserved) })
}) {}
