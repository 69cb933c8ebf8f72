import { expect, it } from "@effect/vitest"
import { Duration, Effect, Layer, Option } from "effect"
import { makeMemorySessionStore } from "../../src/sessions/MemorySessionStore.js"
import { SessionStore } from "../../src/sessions/SessionStore.js"
import { uniqueId } from "../support/testApp.js"
import { sampleSession, sessionStoreContract } from "./SessionStore.contract.js"

sessionStoreContract("memory", Layer.effect(SessionStore, makeMemorySessionStore(Duration.days(30))))

it.effect("sessions older than the retention are dropped", () =>
  Effect.gen(function* () {
    let now = Date.parse("2024-06-01T00:00:00Z")
    const store = yield* makeMemorySessionStore(Duration.hours(1), () => now)
    const agentId = uniqueId("agent")
    const old = sampleSession(agentId, { createdAt: new Date(now).toISOString() })
    yield* store.insert(old)
    now += Duration.toMillis(Duration.hours(2))
    const fresh = sampleSession(agentId, { createdAt: new Date(now).toISOString() })
    yield* store.insert(fresh)
    expect(yield* store.get(agentId, old.id)).toEqual(Option.none())
    expect((yield* store.list(agentId, { limit: 10 })).items.map((s) => s.id)).toEqual([fresh.id])
  })
)

it.effect("checkpoints go with their session at the retention, and so does one whose record was never written", () =>
  Effect.gen(function* () {
    let now = Date.parse("2024-06-01T00:00:00Z")
    const store = yield* makeMemorySessionStore(Duration.hours(1), () => now)
    const agentId = uniqueId("agent")
    const old = sampleSession(agentId, { createdAt: new Date(now).toISOString() })
    yield* store.insert(old)
    yield* store.saveCheckpoint(agentId, old.id, { step: 1 })
    yield* store.saveCheckpoint(agentId, "ses_never_recorded", { step: 1 })
    now += Duration.toMillis(Duration.minutes(30))
    const kept = sampleSession(agentId, { createdAt: new Date(now).toISOString() })
    yield* store.insert(kept)
    yield* store.saveCheckpoint(agentId, kept.id, { step: 2 })
    now += Duration.toMillis(Duration.minutes(45))
    yield* store.insert(sampleSession(agentId, { createdAt: new Date(now).toISOString() }))
    expect(yield* store.checkpointOf(agentId, old.id)).toEqual(Option.none())
    expect(yield* store.checkpointOf(agentId, "ses_never_recorded")).toEqual(Option.none())
    expect(yield* store.checkpointOf(agentId, kept.id)).toEqual(Option.some({ step: 2 }))
  })
)
