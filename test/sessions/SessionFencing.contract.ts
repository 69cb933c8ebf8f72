import { expect, layer } from "@effect/vitest"
import { Effect, type Layer, Option } from "effect"
import { SessionFencing } from "../../src/kernel/SessionFencing.js"
import { SessionStore } from "../../src/sessions/SessionStore.js"
import { uniqueId } from "../support/testApp.js"
import { sampleSession } from "./SessionStore.contract.js"

/**
 * What every SessionFencing adapter must do (docs/reliability.md, "Fencing"), beside the session
 * store it shares the records with: a session's rescue is claimed once, atomically, whoever races
 * for it; notes left for an owner are read once.
 */
export const sessionFencingContract = (adapter: string, storeLayer: Layer.Layer<SessionFencing | SessionStore, unknown>) =>
  layer(storeLayer, { excludeTestServices: true, timeout: "30 seconds" })(`SessionFencing contract (${adapter})`, (it) => {
    it.effect("the first claimant of a session's rescue wins, and again on a retry; every other claimant loses", () =>
      Effect.gen(function* () {
        const fencing = yield* SessionFencing
        const store = yield* SessionStore
        const session = sampleSession(uniqueId("agent"), { instanceId: "a" })
        yield* store.insert(session)
        const ref = { agentId: session.agentId, sessionId: session.id }
        expect(yield* fencing.claimRescue(ref, "a")).toBe(true)
        expect(yield* fencing.claimRescue(ref, "b")).toBe(false)
        expect(yield* fencing.claimRescue(ref, "a")).toBe(true)
        // The record itself is untouched by the claim, and its writes keep the claim.
        expect(yield* store.get(session.agentId, session.id)).toEqual(Option.some(session))
        yield* store.update(session.agentId, session.id, (current) => ({ ...current, status: "completed", endReason: "caller_hangup" }))
        expect(yield* fencing.claimRescue(ref, "b")).toBe(false)
      }))

    it.effect("of 20 instances racing for one rescue, exactly one wins", () =>
      Effect.gen(function* () {
        const fencing = yield* SessionFencing
        const ref = { agentId: uniqueId("agent"), sessionId: uniqueId("ses") }
        const won = yield* Effect.forEach(Array.from({ length: 20 }, (_, i) => `instance-${i}`), (by) => fencing.claimRescue(ref, by), {
          concurrency: "unbounded"
        })
        expect(won.filter(Boolean)).toHaveLength(1)
      }))

    it.effect("a claim on a session with no record leaves it reading as absent", () =>
      Effect.gen(function* () {
        const fencing = yield* SessionFencing
        const store = yield* SessionStore
        const ref = { agentId: uniqueId("agent"), sessionId: uniqueId("ses") }
        expect(yield* fencing.claimRescue(ref, "a")).toBe(true)
        expect(yield* store.get(ref.agentId, ref.sessionId)).toEqual(Option.none())
      }))

    it.effect("notes left for an owner are read once, and only by it", () =>
      Effect.gen(function* () {
        const fencing = yield* SessionFencing
        const owner = uniqueId("owner")
        const first = { agentId: uniqueId("agent"), sessionId: uniqueId("ses") }
        const second = { agentId: uniqueId("agent"), sessionId: uniqueId("ses") }
        yield* fencing.noteTaken(owner, first)
        yield* fencing.noteTaken(owner, second)
        yield* fencing.noteTaken(owner, first)
        expect(yield* fencing.takenFrom(uniqueId("other"))).toEqual([])
        const taken = yield* fencing.takenFrom(owner)
        expect(new Set(taken.map((ref) => ref.sessionId))).toEqual(new Set([first.sessionId, second.sessionId]))
        expect(yield* fencing.takenFrom(owner)).toEqual([])
      }))
  })
