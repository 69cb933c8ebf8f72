import { Effect, Layer } from "effect"
import { type FencedSession, SessionFencing } from "./SessionFencing.js"

/** Claims are forgotten after a day (a call is long over); swept when this many are held. */
const FORGET_AFTER_MS = 86_400_000
const SWEEP_AT = 100_000

/** The embedded store's fencing: one process, so claims and notes are maps. */
export const makeMemorySessionFencing = Effect.sync(() => {
  const rescuedBy = new Map<string, { by: string; atMs: number }>()
  const taken = new Map<string, Map<string, FencedSession>>()
  const keyOf = (session: FencedSession) => `${session.agentId} ${session.sessionId}`
  return SessionFencing.of({
    claimRescue: (session, by) =>
      Effect.clockWith((clock) => Effect.sync(() => {
        const key = keyOf(session)
        const held = rescuedBy.get(key)
        if (held !== undefined) return held.by === by
        const now = clock.unsafeCurrentTimeMillis()
        if (rescuedBy.size >= SWEEP_AT) for (const [k, v] of rescuedBy) if (now - v.atMs > FORGET_AFTER_MS) rescuedBy.delete(k)
        rescuedBy.set(key, { by, atMs: now })
        return true
      })),
    noteTaken: (owner, session) =>
      Effect.sync(() => {
        let notes = taken.get(owner)
        if (notes === undefined) taken.set(owner, (notes = new Map()))
        notes.set(keyOf(session), session)
      }),
    takenFrom: (owner) =>
      Effect.sync(() => {
        const notes = taken.get(owner)
        taken.delete(owner)
        return notes === undefined ? [] : [...notes.values()]
      })
  })
})

export const MemorySessionFencingLive = Layer.effect(SessionFencing, makeMemorySessionFencing)
