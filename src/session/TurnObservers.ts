import { Context, Effect } from "effect"
import { nullTurnObserver, type TurnObserver } from "../turns/TurnObserver.js"
import type { SessionInfo } from "./SessionInfo.js"

export interface TurnObserversShape {
  /**
   * The observer of one session, asked for once when its stream starts (before the agent is
   * connected). The relay then calls it synchronously for every caller frame, DTMF digit and
   * agent frame, and calls `close` once when the session ends.
   */
  readonly forSession: (session: SessionInfo) => Effect.Effect<TurnObserver>
}

/**
 * The hook the turn tracker plugs into: provide a layer for this tag (in src/main.ts) to observe
 * every call. Without one, sessions use the null observer.
 */
export class TurnObservers extends Context.Reference<TurnObservers>()("callgate/TurnObservers", {
  defaultValue: (): TurnObserversShape => ({ forSession: () => Effect.succeed(nullTurnObserver) })
}) {}
