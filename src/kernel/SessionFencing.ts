import { Context, type Effect } from "effect"
import type { StoreError } from "./StoreError.js"

/** A stored session, by its agent and id. */
export interface FencedSession {
  readonly agentId: string
  readonly sessionId: string
}

/**
 * Fencing of live calls between instances (docs/reliability.md, "Fencing"). Two adapters (in
 * memory, Redis: a field of the session's own record hash, so the claim is atomic with the
 * record in one slot) pass one contract suite (test/sessions/SessionFencing.contract.ts).
 *
 * - `claimRescue`: the carrier rescue of a session's call is claimed in the store before any
 *   carrier request: the first claimant gets true (and again on a retry), everyone else false.
 *   Whoever rescues (the owner, a survivor reconciling a silent instance, the `<Redirect>` after
 *   the stream), a call is rescued through the carrier at most once.
 * - `noteTaken` / `takenFrom`: an instance that claims another's live session leaves it a note;
 *   the owner reads (and clears) its notes at every registry refresh, and stops serving those
 *   sessions at once: it had paused, or lost the store, for longer than the fleet waits.
 */
export interface SessionFencingShape {
  readonly claimRescue: (session: FencedSession, by: string) => Effect.Effect<boolean, StoreError>
  readonly noteTaken: (owner: string, session: FencedSession) => Effect.Effect<void, StoreError>
  readonly takenFrom: (owner: string) => Effect.Effect<ReadonlyArray<FencedSession>, StoreError>
}

export class SessionFencing extends Context.Tag("callgate/SessionFencing")<SessionFencing, SessionFencingShape>() {}
