import { Context, type Effect, type Scope } from "effect"
import { nullTurnObserver, type TurnObserver } from "../turns/TurnObserver.js"
import type { TurnRecord } from "../turns/TurnRecord.js"
import type { HardError } from "../kernel/HardError.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"

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
   * agent frame, and calls `close` once when the session ends. Whatever the observer runs in the
   * background (its response watchdog) lives in the session's scope.
   */
  readonly forSession: (session: SessionInfo, control: SessionControl) => Effect.Effect<ObservedSession, never, Scope.Scope>
}

export const unobserved: ObservedSession = { observer: nullTurnObserver, turns: () => [] }

/**
 * Turn timing on every call (SessionTurnObservers.ts). A required service: a wiring without it is a
 * type error, never a call that silently goes untimed.
 */
export class TurnObservers extends Context.Tag("callgate/TurnObservers")<TurnObservers, TurnObserversShape>() {}
