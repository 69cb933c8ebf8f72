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
