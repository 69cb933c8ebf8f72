import { expect, layer } from "@effect/vitest"
import { Effect, Either, Exit, Layer, Option } from "effect"
import { FALLBACK_DEFAULTS, type StoredEnvironment } from "../../src/environments/EnvironmentSchema.js"
import { EnvironmentStore } from "../../src/environments/EnvironmentStore.js"
import { uniqueId } from "../support/testApp.js"

/** A stored environment with no secrets, created at `createdAt`; tests override what they need. */
export const sampleEnvironment = (agentId: string, overrides: Partial<StoredEnvironment> = {}): StoredEnvironment => {
  const createdAt = overrides.createdAt ?? new Date().toISOString()
  return {
    id: uniqueId("env"),
    agentId,
    name: "support line",
    createdAt,
    updatedAt: createdAt,
    version: 1,
    webhookUrl: null,
    webhookSecretSealed: null,
    webhookSecretLast4: null,
    errorFallbackType: "disabled",
    errorFallbackValue: null,
    errorFallbackTimeout: FALLBACK_DEFAULTS.timeout,
    errorFallbackOccurrenceThreshold: FALLBACK_DEFAULTS.threshold,
    errorFallbackTimeWindow: FALLBACK_DEFAULTS.window,
    errorFallbackWebhookSecretSealed: null,
    agentUrl: null,
    ...overrides
  }
}

class Refused {
  readonly _tag = "Refused"
}

/**
 * The behaviour every EnvironmentStore adapter must have. Run by one test file per adapter, so the
 * in-memory store and the Redis store are held to exactly the same rules.
 */
export const environmentStoreContract = (adapter: string, storeLayer: Layer.Layer<EnvironmentStore, unknown>) =>
  layer(storeLayer, { excludeTestServices: true, timeout: "30 seconds" })(`EnvironmentStore contract (${adapter})`, (it) => {
    it.effect("get returns what insert stored, and none for an unknown id", () =>
      Effect.gen(function* () {
        const store = yield* EnvironmentStore
        const env = sampleEnvironment(uniqueId("agent"), { webhookUrl: "https://hooks.example.com/a", webhookSecretLast4: "ab==" })
        yield* store.insert(env)
        expect(yield* store.get(env.agentId, env.id)).toEqual(Option.some(env))
        expect(yield* store.get(env.agentId, uniqueId("missing"))).toEqual(Option.none())
        // An environment is found only under its own agent.
        expect(yield* store.get(uniqueId("other"), env.id)).toEqual(Option.none())
      }))

    it.effect("listAgents lists every agent with environments and how many, by agent id, and drops one whose last is gone", () =>
      Effect.gen(function* () {
        const store = yield* EnvironmentStore
        // Other tests share the store: look only at this test's agents.
        const prefix = uniqueId("la")
        const [a, b] = [`${prefix}_a`, `${prefix}_b`]
        const mine = (all: ReadonlyArray<{ agentId: string; environments: number }>) => all.filter((row) => row.agentId.startsWith(prefix))
        const first = sampleEnvironment(b)
        yield* store.insert(first)
        yield* store.insert(sampleEnvironment(a))
        yield* store.insert(sampleEnvironment(a))
        expect(mine(yield* store.listAgents)).toEqual([
          { agentId: a, environments: 2 },
          { agentId: b, environments: 1 }
        ])
        expect(yield* store.remove(b, first.id)).toBe(true)
        expect(mine(yield* store.listAgents)).toEqual([{ agentId: a, environments: 2 }])
        yield* store.insert(sampleEnvironment(b))
        expect(mine(yield* store.listAgents)).toEqual([
          { agentId: a, environments: 2 },
          { agentId: b, environments: 1 }
        ])
      }))

    it.effect("list returns the agent's environments oldest first, and only the agent's", () =>
      Effect.gen(function* () {
        const store = yield* EnvironmentStore
        const agentId = uniqueId("agent")
        const base = Date.parse("2024-05-01T10:00:00.000Z")
        const at = (seconds: number) => new Date(base + seconds * 1000).toISOString()
        const middle = sampleEnvironment(agentId, { name: "middle", createdAt: at(10) })
        const newest = sampleEnvironment(agentId, { name: "newest", createdAt: at(20) })
        const oldest = sampleEnvironment(agentId, { name: "oldest", createdAt: at(0) })
        const stranger = sampleEnvironment(uniqueId("agent"), { createdAt: at(5) })
        // Inserted out of order: the order comes from createdAt, not from insertion.
        for (const env of [middle, newest, stranger, oldest]) yield* store.insert(env)
        const listed = yield* store.list(agentId)
        expect(listed.map((env) => env.name)).toEqual(["oldest", "middle", "newest"])
        expect(listed).toEqual([oldest, middle, newest])
        expect(yield* store.list(uniqueId("nobody"))).toEqual([])
      }))

    it.effect("update applies the change, bumps the version by one and returns what was stored", () =>
      Effect.gen(function* () {
        const store = yield* EnvironmentStore
        const env = sampleEnvironment(uniqueId("agent"))
        yield* store.insert(env)
        const updated = yield* store.update(env.agentId, env.id, (current) =>
          Either.right({ ...current, name: "renamed", errorFallbackTimeout: 7 })
        )
        expect(Option.isSome(updated)).toBe(true)
        const stored = Option.getOrThrow(updated)
        expect(stored).toEqual({ ...env, name: "renamed", errorFallbackTimeout: 7, version: env.version + 1 })
        expect(yield* store.get(env.agentId, env.id)).toEqual(Option.some(stored))
      }))

    it.effect("update of a missing environment returns none and never calls the change", () =>
      Effect.gen(function* () {
        const store = yield* EnvironmentStore
        let called = false
        const result = yield* store.update(uniqueId("agent"), uniqueId("env"), (current) => {
          called = true
          return Either.right(current)
        })
        expect(result).toEqual(Option.none())
        expect(called).toBe(false)
      }))

    it.effect("a change that refuses (Left) fails the update with its error and leaves the record untouched", () =>
      Effect.gen(function* () {
        const store = yield* EnvironmentStore
        const env = sampleEnvironment(uniqueId("agent"), { name: "before" })
        yield* store.insert(env)
        const exit = yield* Effect.exit(
          store.update(env.agentId, env.id, (current) =>
            current.name === "before" ? Either.left(new Refused()) : Either.right({ ...current, name: "after" })
          )
        )
        expect(exit).toEqual(Exit.fail(new Refused()))
        expect(yield* store.get(env.agentId, env.id)).toEqual(Option.some(env))
      }))

    it.effect("remove deletes the record and its listing; removing again reports false", () =>
      Effect.gen(function* () {
        const store = yield* EnvironmentStore
        const agentId = uniqueId("agent")
        const kept = sampleEnvironment(agentId, { createdAt: "2024-01-01T00:00:00.000Z" })
        const gone = sampleEnvironment(agentId, { createdAt: "2024-01-02T00:00:00.000Z" })
        yield* store.insert(kept)
        yield* store.insert(gone)
        expect(yield* store.remove(agentId, gone.id)).toBe(true)
        expect(yield* store.get(agentId, gone.id)).toEqual(Option.none())
        expect(yield* store.list(agentId)).toEqual([kept])
        expect(yield* store.remove(agentId, gone.id)).toBe(false)
        expect(yield* store.update(agentId, gone.id, (current) => Either.right(current))).toEqual(Option.none())
      }))

    it.effect("ping succeeds while the store is reachable", () =>
      Effect.gen(function* () {
        const store = yield* EnvironmentStore
        yield* store.ping
      }))

    it.effect("concurrent updates of every distinct field all land", () =>
      Effect.gen(function* () {
        const store = yield* EnvironmentStore
        const env = sampleEnvironment(uniqueId("agent"))
        yield* store.insert(env)
        const changes: ReadonlyArray<Partial<StoredEnvironment>> = [
          { name: "concurrent" },
          { webhookUrl: "https://hooks.example.com/events" },
          { webhookSecretSealed: "v1.sealed.webhook", webhookSecretLast4: "wxyz" },
          { errorFallbackType: "phone", errorFallbackValue: "+14155550100" },
          { errorFallbackTimeout: 12 },
          { errorFallbackOccurrenceThreshold: 3 },
          { errorFallbackTimeWindow: 900 },
          { errorFallbackWebhookSecretSealed: "v1.sealed.fallback" },
          { agentUrl: "wss://agent.example.com/stream" },
          { updatedAt: "2030-01-01T00:00:00.000Z" }
        ]
        yield* Effect.forEach(
          changes,
          (change) => store.update(env.agentId, env.id, (current) => Either.right({ ...current, ...change })),
          { concurrency: "unbounded" }
        )
        const final = Option.getOrThrow(yield* store.get(env.agentId, env.id))
        expect(final).toEqual({ ...env, ...Object.assign({}, ...changes), version: env.version + changes.length })
      }))

    it.effect("50 concurrent updates, each of its own part of one environment, never overwrite each other", () =>
      Effect.gen(function* () {
        const store = yield* EnvironmentStore
        const env = sampleEnvironment(uniqueId("agent"), { name: "{}" })
        yield* store.insert(env)
        const writers = Array.from({ length: 50 }, (_, i) => i)
        // Each writer sets its own slot of a map kept in `name`: a write based on a stale read would
        // drop the slots other writers committed in between.
        yield* Effect.forEach(
          writers,
          (i) =>
            store.update(env.agentId, env.id, (current) =>
              Either.right({ ...current, name: JSON.stringify({ ...JSON.parse(current.name), [`slot${i}`]: i }) })
            ),
          { concurrency: "unbounded" }
        )
        const final = Option.getOrThrow(yield* store.get(env.agentId, env.id))
        expect(JSON.parse(final.name)).toEqual(Object.fromEntries(writers.map((i) => [`slot${i}`, i])))
        expect(final.version).toBe(env.version + writers.length)
      }))
  })
