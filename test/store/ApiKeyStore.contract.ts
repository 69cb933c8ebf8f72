import { expect, layer } from "@effect/vitest"
import { createHash } from "node:crypto"
import { Effect, type Layer, Option } from "effect"
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
  })
