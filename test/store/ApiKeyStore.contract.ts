import { expect, layer } from "@effect/vitest"
import { createHash } from "node:crypto"
import { Deferred, Effect, type Layer, Option } from "effect"
import { ApiKeyStore, type StoredApiKey } from "../../src/apikeys/ApiKeyStore.js"
import { uniqueId } from "../support/testApp.js"

export const sampleApiKey = (overrides: Partial<StoredApiKey> = {}): StoredApiKey => ({
  id: uniqueId("key"),
  name: "ci deployer",
  keyHash: createHash("sha256").update(uniqueId("secret-key")).digest("hex"),
  agentIds: [uniqueId("agent"), uniqueId("agent")],
  createdAt: new Date().toISOString(),
  ...overrides
})

/** The behaviour every ApiKeyStore adapter must have. */
export const apiKeyStoreContract = (adapter: string, storeLayer: Layer.Layer<ApiKeyStore, unknown>) =>
  layer(storeLayer, { excludeTestServices: true, timeout: "30 seconds" })(`ApiKeyStore contract (${adapter})`, (it) => {
    it.effect("findByHash returns the stored key, with its agents, by its hash", () =>
      Effect.gen(function* () {
        const store = yield* ApiKeyStore
        const key = sampleApiKey()
        yield* store.insert(key)
        expect(yield* store.findByHash(key.keyHash)).toEqual(Option.some(key))
      }))

    it.effect("findByHash of an unknown hash returns none", () =>
      Effect.gen(function* () {
        const store = yield* ApiKeyStore
        yield* store.insert(sampleApiKey())
        expect(yield* store.findByHash(createHash("sha256").update(uniqueId("never-issued")).digest("hex"))).toEqual(Option.none())
      }))

    it.effect("keys are told apart by their hashes", () =>
      Effect.gen(function* () {
        const store = yield* ApiKeyStore
        const first = sampleApiKey({ name: "first" })
        const second = sampleApiKey({ name: "second" })
        yield* Effect.all([store.insert(first), store.insert(second)], { concurrency: "unbounded" })
        expect(Option.map(yield* store.findByHash(first.keyHash), (k) => k.name)).toEqual(Option.some("first"))
        expect(Option.map(yield* store.findByHash(second.keyHash), (k) => k.name)).toEqual(Option.some("second"))
      }))

    it.effect("get finds a key by id; list shows it with no last use until touched", () =>
      Effect.gen(function* () {
        const store = yield* ApiKeyStore
        const key = sampleApiKey({ expiresAt: "2099-01-01T00:00:00.000Z" })
        yield* store.insert(key)
        expect(yield* store.get(key.id)).toEqual(Option.some(key))
        expect(yield* store.get(uniqueId("key"))).toEqual(Option.none())
        expect((yield* store.list).find((listed) => listed.key.id === key.id)).toEqual({ key, lastUsedAt: null })
        yield* store.touch(key.id, "2026-01-02T03:04:05.000Z")
        expect((yield* store.list).find((listed) => listed.key.id === key.id)).toEqual({ key, lastUsedAt: "2026-01-02T03:04:05.000Z" })
      }))

    it.effect("remove deletes the key by every route and tells revocation subscribers, here and on any other subscriber", () =>
      Effect.gen(function* () {
        const store = yield* ApiKeyStore
        const key = sampleApiKey()
        yield* store.insert(key)
        const heard = yield* Deferred.make<string>()
        yield* store.subscribeRevocations((id) => {
          if (id === key.id) Deferred.unsafeDone(heard, Effect.succeed(id))
        })
        expect(yield* store.remove(key.id)).toEqual(Option.some(key))
        expect(yield* Deferred.await(heard)).toBe(key.id)
        expect(yield* store.findByHash(key.keyHash)).toEqual(Option.none())
        expect(yield* store.get(key.id)).toEqual(Option.none())
        expect((yield* store.list).some((listed) => listed.key.id === key.id)).toBe(false)
        expect(yield* store.remove(key.id)).toEqual(Option.none())
      }).pipe(Effect.scoped))

    it.effect("replaceHash: the new hash finds the key; the old one only with a grace period, and remove forgets both", () =>
      Effect.gen(function* () {
        const store = yield* ApiKeyStore
        const key = sampleApiKey()
        yield* store.insert(key)
        const second = createHash("sha256").update(uniqueId("second")).digest("hex")
        const rotated = yield* store.replaceHash(key.id, second, undefined)
        expect(Option.map(rotated, (k) => k.keyHash)).toEqual(Option.some(second))
        expect(yield* store.findByHash(key.keyHash)).toEqual(Option.none())
        expect(Option.map(yield* store.findByHash(second), (k) => k.id)).toEqual(Option.some(key.id))

        const third = createHash("sha256").update(uniqueId("third")).digest("hex")
        const until = new Date(Date.now() + 3_600_000).toISOString()
        yield* store.replaceHash(key.id, third, { keyHash: second, until })
        const viaOld = yield* store.findByHash(second)
        expect(Option.map(viaOld, (k) => [k.keyHash, k.previous])).toEqual(Option.some([third, { keyHash: second, until }]))
        expect(Option.map(yield* store.get(key.id), (k) => k.keyHash)).toEqual(Option.some(third))

        yield* store.remove(key.id)
        expect(yield* store.findByHash(second)).toEqual(Option.none())
        expect(yield* store.findByHash(third)).toEqual(Option.none())
        expect(yield* store.replaceHash(key.id, third, undefined)).toEqual(Option.none())
      }))
  })
