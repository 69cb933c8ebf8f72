import { Context, type Effect, type Option } from "effect"
import type { Checkpoint } from "../kernel/CallLegs.js"
import type { StoreError } from "../kernel/StoreError.js"
import type { Session, SessionStatus } from "./SessionSchema.js"

/** A position in the newest-first order: strictly older sessions come after it. */
export interface SessionCursor {
  readonly createdAtMs: number
  readonly id: string
}

export interface SessionListOptions {
  readonly environmentId?: string | undefined
  readonly status?: SessionStatus | undefined
  readonly limit: number
  readonly after?: SessionCursor | undefined
}

export interface SessionPage {
  readonly items: ReadonlyArray<Session>
  /** Set when more sessions may follow: the position of the last item. */
  readonly next: Option.Option<SessionCursor>
}

/**
 * Where sessions live. Two adapters (in-memory, Redis) pass one contract suite
 * (test/sessions/SessionStore.contract.ts). Order is newest first: createdAt descending, then id
 * descending. Sessions older than the retention are dropped.
 *
 * `update` is a read-modify-write that never loses a concurrent write (the turn tracker appends
 * turns while the session ends): the adapter re-reads and re-applies `change` when another
 * writer got in between. `change` must be pure.
 */
export interface SessionStoreShape {
  /** Writes the record; one that carries an `instanceId` also joins that instance's owned sessions. */
  readonly insert: (session: Session) => Effect.Effect<void, StoreError>
  readonly get: (agentId: string, sessionId: string) => Effect.Effect<Option.Option<Session>, StoreError>
  readonly update: (
    agentId: string,
    sessionId: string,
    change: (current: Session) => Session
  ) => Effect.Effect<Option.Option<Session>, StoreError>
  readonly list: (agentId: string, options: SessionListOptions) => Effect.Effect<SessionPage, StoreError>
  /**
   * The sessions an instance owns and has not let go of yet (docs/reliability.md): inserted with its
   * `instanceId`, not yet `disown`ed (their end written and session.ended queued). What is left
   * after the instance stopped is its orphans.
   */
  readonly ownedBy: (instanceId: string) => Effect.Effect<ReadonlyArray<SessionRef>, StoreError>
  /** Lets go of a session once its end is written and its session.ended queued; a second call does nothing. */
  readonly disown: (instanceId: string, ref: SessionRef) => Effect.Effect<void, StoreError>
  /**
   * Keeps the agent's latest checkpoint with the session (docs/calls.md, "Checkpoints"), replacing
   * the one before; it goes away with the session's record, at the retention. One saved before the
   * record is written is kept for it. Not part of the record: `get`, `update` and `list` never carry it.
   */
  readonly saveCheckpoint: (agentId: string, sessionId: string, checkpoint: Checkpoint) => Effect.Effect<void, StoreError>
  /** The session's latest checkpoint; none when its agents never sent one (or the session is gone). */
  readonly checkpointOf: (agentId: string, sessionId: string) => Effect.Effect<Option.Option<Checkpoint>, StoreError>
}

export interface SessionRef {
  readonly agentId: string
  readonly sessionId: string
}

export class SessionStore extends Context.Tag("callgate/SessionStore")<SessionStore, SessionStoreShape>() {}

/** Newest-first comparison: negative when `a` comes before `b`. */
export const newestFirst = (a: SessionCursor, b: SessionCursor): number =>
  b.createdAtMs - a.createdAtMs || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0)

export const cursorOf = (session: Session): SessionCursor => ({ createdAtMs: Date.parse(session.createdAt), id: session.id })
