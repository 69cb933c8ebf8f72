import { expect, it } from "@effect/vitest"
import { Duration, Effect, Layer, Option, TestClock } from "effect"
import { makeMemorySessionStore } from "../../src/sessions/MemorySessionStore.js"
import { SessionStore } from "../../src/sessions/SessionStore.js"
import { nowIso } from "../../src/kernel/Time.js"
import { uniqueId } from "../support/testApp.js"
import { sampleSession, sessionStoreContract } from "./SessionStore.contract.js"

sessionStoreContract("memory", Layer.effect(SessionStore, makeMemorySessionStore(Duration.days(30))))

it.effect("sessions older than the retention are dropped, on the Clock (TestClock): not before", () =>
  Effect.gen(function* () {
    yield* TestClock.setTime(Date.parse("2024-06-01T00:00:00Z"))
    const store = yield* makeMemorySessionStore(Duration.hours(1))
    const agentId = uniqueId("agent")
    const old = sampleSession(agentId, { createdAt: yield* nowIso })
    yield* store.insert(old)
    // Just inside the retention (the prune runs on insert, at most once a minute): kept.
    yield* TestClock.adjust("59 minutes")
    const kept = sampleSession(agentId, { createdAt: yield* nowIso })
    yield* store.insert(kept)
    expect(Option.isSome(yield* store.get(agentId, old.id))).toBe(true)
    // Past it: dropped on the next insert.
    yield* TestClock.adjust("2 minutes")
    const fresh = sampleSession(agentId, { createdAt: yield* nowIso })
    yield* store.insert(fresh)
    expect(yield* store.get(agentId, old.id)).toEqual(Option.none())
    expect((yield* store.list(agentId, { limit: 10 })).items.map((s) => s.id)).toEqual([fresh.id, kept.id])
  })
)

it.effect("checkpoints go with their session at the retention, and so does one whose record was never written (TestClock)", () =>
  Effect.gen(function* () {
    yield* TestClock.setTime(Date.parse("2024-06-01T00:00:00Z"))
    const store = yield* makeMemorySessionStore(Duration.hours(1))
    const agentId = uniqueId("agent")
    const old = sampleSession(agentId, { createdAt: yield* nowIso })
    yield* store.insert(old)
    yield* store.saveCheckpoint(agentId, old.id, { step: 1 })
    yield* store.saveCheckpoint(agentId, "ses_never_recorded", { step: 1 })
    yield* TestClock.adjust("30 minutes")
    const kept = sampleSession(agentId, { createdAt: yield* nowIso })
    yield* store.insert(kept)
    yield* store.saveCheckpoint(agentId, kept.id, { step: 2 })
    yield* TestClock.adjust("45 minutes")
    yield* store.insert(sampleSession(agentId, { createdAt: yield* nowIso }))
    expect(yield* store.checkpointOf(agentId, old.id)).toEqual(Option.none())
    expect(yield* store.checkpointOf(agentId, "ses_never_recorded")).toEqual(Option.none())
    expect(yield* store.checkpointOf(agentId, kept.id)).toEqual(Option.some({ step: 2 }))
  })
)
