import type { TurnRecord } from "../../src/turns/TurnRecord.js"
import { expect, layer } from "@effect/vitest"
import { Effect, type Layer, Option } from "effect"
import type { Session } from "../../src/sessions/SessionSchema.js"
import { SessionStore, type SessionCursor } from "../../src/sessions/SessionStore.js"
import { uniqueId } from "../support/testApp.js"

/** An active session created `secondsAgo` before now; tests override what they need. */
export const sampleSession = (agentId: string, overrides: Partial<Session> = {}): Session => ({
  id: uniqueId("ses"),
  agentId,
  environmentId: "env_main",
  provider: "twilio",
  callId: uniqueId("CA"),
  from: "+14155550100",
  to: "+14155550111",
  direction: "inbound",
  createdAt: new Date().toISOString(),
  endedAt: null,
  status: "active",
  endReason: null,
  turns: [],
  fallback: null,
  ...overrides
})

const at = (base: number, seconds: number) => new Date(base + seconds * 1000).toISOString()

/** Reads every page; returns the ids in order and the number of pages. */
const readAll = (agentId: string, options: { environmentId?: string; status?: Session["status"]; limit: number }) =>
  Effect.gen(function* () {
    const store = yield* SessionStore
    const ids: Array<string> = []
    let after: SessionCursor | undefined
    let pages = 0
    for (;;) {
      const page = yield* store.list(agentId, { ...options, after })
      pages++
      ids.push(...page.items.map((s) => s.id))
      if (Option.isNone(page.next)) return { ids, pages }
      after = page.next.value
      if (pages > 100) throw new Error("pagination does not end")
    }
  })

/**
 * The behaviour every SessionStore adapter must have, run by one test file per adapter so the
 * in-memory store and the Redis store are held to the same rules.
 */
/** A valid turn record, told apart by its index. */
const turn = (index: number): TurnRecord => ({
  index,
  input: "speech",
  callerEndedAt: new Date(1_700_000_000_000 + index * 1000).toISOString(),
  agentRespondedAt: null,
  latencyMs: null,
  timeoutOccurrences: 0
})

export const sessionStoreContract = (adapter: string, storeLayer: Layer.Layer<SessionStore, unknown>) =>
  layer(storeLayer, { excludeTestServices: true, timeout: "30 seconds" })(`SessionStore contract (${adapter})`, (it) => {
    it.effect("get returns what insert stored, only under its own agent", () =>
      Effect.gen(function* () {
        const store = yield* SessionStore
        const session = sampleSession(uniqueId("agent"), { turns: [turn(1)], from: null })
        yield* store.insert(session)
        expect(yield* store.get(session.agentId, session.id)).toEqual(Option.some(session))
        expect(yield* store.get(session.agentId, uniqueId("missing"))).toEqual(Option.none())
        expect(yield* store.get(uniqueId("other"), session.id)).toEqual(Option.none())
      }))

    it.effect("a session inserted with an instanceId is owned by it until disowned; disowning twice is harmless", () =>
      Effect.gen(function* () {
        const store = yield* SessionStore
        const instanceId = uniqueId("inst")
        const agentId = uniqueId("agent")
        const one = sampleSession(agentId, { instanceId, callKind: "twilio" })
        const two = sampleSession(agentId, { instanceId })
        yield* store.insert(one)
        yield* store.insert(two)
        yield* store.insert(sampleSession(agentId))
        const owned = yield* store.ownedBy(instanceId)
        expect([...owned].sort((a, b) => a.sessionId.localeCompare(b.sessionId))).toEqual(
          [one, two].map((s) => ({ agentId, sessionId: s.id })).sort((a, b) => a.sessionId.localeCompare(b.sessionId))
        )
        expect(yield* store.get(agentId, one.id)).toEqual(Option.some(one))
        yield* store.disown(instanceId, { agentId, sessionId: one.id })
        yield* store.disown(instanceId, { agentId, sessionId: one.id })
        expect(yield* store.ownedBy(instanceId)).toEqual([{ agentId, sessionId: two.id }])
        expect(yield* store.ownedBy(uniqueId("nobody"))).toEqual([])
      }))

    it.effect("update applies the change and returns the new record; none for an unknown session", () =>
      Effect.gen(function* () {
        const store = yield* SessionStore
        const session = sampleSession(uniqueId("agent"))
        yield* store.insert(session)
        const endedAt = new Date().toISOString()
        const updated = yield* store.update(session.agentId, session.id, (current) => ({
          ...current,
          status: "completed",
          endReason: "caller_hangup",
          endedAt
        }))
        expect(updated).toEqual(Option.some({ ...session, status: "completed", endReason: "caller_hangup", endedAt }))
        expect(yield* store.get(session.agentId, session.id)).toEqual(updated)
        expect(yield* store.update(session.agentId, uniqueId("missing"), (current) => current)).toEqual(Option.none())
      }))

    it.effect("concurrent updates of one session are all kept", () =>
      Effect.gen(function* () {
        const store = yield* SessionStore
        const session = sampleSession(uniqueId("agent"))
        yield* store.insert(session)
        yield* Effect.forEach(
          Array.from({ length: 20 }, (_, n) => n),
          (n) => store.update(session.agentId, session.id, (current) => ({ ...current, turns: [...current.turns, turn(n)] })),
          { concurrency: "unbounded" }
        )
        const stored = yield* store.get(session.agentId, session.id)
        expect(
          Option.getOrThrow(stored)
            .turns.map((t) => t.index)
            .sort((a, b) => a - b)
        ).toEqual(Array.from({ length: 20 }, (_, n) => n))
      }))

    it.effect("checkpoints: none at first, the latest kept, only under its own agent and session, never in the record", () =>
      Effect.gen(function* () {
        const store = yield* SessionStore
        const session = sampleSession(uniqueId("agent"))
        yield* store.insert(session)
        expect(yield* store.checkpointOf(session.agentId, session.id)).toEqual(Option.none())
        yield* store.saveCheckpoint(session.agentId, session.id, { step: 1 })
        const latest = { step: 2, slots: { date: "2026-11-27", party: 4 }, said: ["hello", "ciao"], note: "größe 😀", none: null }
        yield* store.saveCheckpoint(session.agentId, session.id, latest)
        expect(yield* store.checkpointOf(session.agentId, session.id)).toEqual(Option.some(latest))
        expect(yield* store.checkpointOf(uniqueId("other"), session.id)).toEqual(Option.none())
        expect(yield* store.checkpointOf(session.agentId, uniqueId("missing"))).toEqual(Option.none())
        // The record is untouched by checkpoints, and a checkpoint by updates and re-inserts.
        expect(yield* store.get(session.agentId, session.id)).toEqual(Option.some(session))
        const ended = { ...session, status: "completed" as const, endReason: "caller_hangup", endedAt: new Date().toISOString() }
        yield* store.update(session.agentId, session.id, () => ended)
        yield* store.insert(ended)
        expect(yield* store.get(session.agentId, session.id)).toEqual(Option.some(ended))
        expect(yield* store.checkpointOf(session.agentId, session.id)).toEqual(Option.some(latest))
      }))

    it.effect("a checkpoint saved before the session's record is kept for it; the record still reads as absent until inserted", () =>
      Effect.gen(function* () {
        const store = yield* SessionStore
        const session = sampleSession(uniqueId("agent"))
        yield* store.saveCheckpoint(session.agentId, session.id, { early: true })
        expect(yield* store.get(session.agentId, session.id)).toEqual(Option.none())
        expect(yield* store.update(session.agentId, session.id, (current) => current)).toEqual(Option.none())
        yield* store.insert(session)
        expect(yield* store.get(session.agentId, session.id)).toEqual(Option.some(session))
        expect(yield* store.checkpointOf(session.agentId, session.id)).toEqual(Option.some({ early: true }))
      }))

    it.effect("what checkpointOf returns is a copy: changing it changes nothing stored", () =>
      Effect.gen(function* () {
        const store = yield* SessionStore
        const session = sampleSession(uniqueId("agent"))
        yield* store.insert(session)
        const checkpoint = { items: [1, 2] }
        yield* store.saveCheckpoint(session.agentId, session.id, checkpoint)
        checkpoint.items.push(3)
        const read = Option.getOrThrow(yield* store.checkpointOf(session.agentId, session.id)) as { items: Array<number> }
        read.items.push(4)
        expect(yield* store.checkpointOf(session.agentId, session.id)).toEqual(Option.some({ items: [1, 2] }))
      }))

    it.effect("list is newest first, paginates without gaps or repeats, and holds only the agent's sessions", () =>
      Effect.gen(function* () {
        const store = yield* SessionStore
        const agentId = uniqueId("agent")
        const base = Date.now() - 3_600_000
        // Two sessions share a createdAt: ties are ordered by id, descending.
        const sessions = [0, 5, 5, 9, 12, 30, 31].map((seconds, n) =>
          sampleSession(agentId, { id: `ses_${n}_${uniqueId("x")}`, createdAt: at(base, seconds) })
        )
        for (const session of [...sessions].reverse()) yield* store.insert(session)
        yield* store.insert(sampleSession(uniqueId("other-agent")))
        const expected = [...sessions]
          .sort((a, b) => Date.parse(b.createdAt) - Date.parse(a.createdAt) || (a.id < b.id ? 1 : -1))
          .map((s) => s.id)

        const everything = yield* store.list(agentId, { limit: 100 })
        expect(everything.items.map((s) => s.id)).toEqual(expected)
        expect(everything.next).toEqual(Option.none())

        for (const limit of [1, 2, 3, 7]) {
          const { ids, pages } = yield* readAll(agentId, { limit })
          expect(ids).toEqual(expected)
          // The last page says so: no empty trailing page.
          expect(pages).toBe(Math.ceil(expected.length / limit))
        }
      }))

    it.effect("list filters by environment and by status, and both together", () =>
      Effect.gen(function* () {
        const store = yield* SessionStore
        const agentId = uniqueId("agent")
        const base = Date.now() - 600_000
        const plan: Array<[string, Session["status"]]> = [
          ["env_a", "completed"],
          ["env_b", "failed"],
          ["env_a", "active"],
          ["env_a", "failed"],
          ["env_b", "completed"],
          ["env_a", "failed"],
          ["env_a", "timeout"]
        ]
        const sessions = plan.map(([environmentId, status], n) => sampleSession(agentId, { environmentId, status, createdAt: at(base, n) }))
        for (const session of sessions) yield* store.insert(session)
        const newestFirst = [...sessions].reverse()
        const ids = (keep: (s: Session) => boolean) => newestFirst.filter(keep).map((s) => s.id)

        expect((yield* readAll(agentId, { environmentId: "env_a", limit: 2 })).ids).toEqual(ids((s) => s.environmentId === "env_a"))
        expect((yield* readAll(agentId, { status: "failed", limit: 2 })).ids).toEqual(ids((s) => s.status === "failed"))
        expect((yield* readAll(agentId, { environmentId: "env_a", status: "failed", limit: 1 })).ids).toEqual(
          ids((s) => s.environmentId === "env_a" && s.status === "failed")
        )
        expect((yield* readAll(agentId, { environmentId: "env_c", limit: 5 })).ids).toEqual([])

        // A status filter follows updates: the active session, once completed, is listed as completed.
        const active = sessions[2]!
        yield* store.update(agentId, active.id, (current) => ({ ...current, status: "completed" }))
        expect((yield* readAll(agentId, { status: "active", limit: 5 })).ids).toEqual([])
        expect((yield* readAll(agentId, { status: "completed", limit: 5 })).ids).toContain(active.id)
      }))
  })
