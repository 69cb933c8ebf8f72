import { describe, expect, layer } from "@effect/vitest"
import { Effect, type Layer } from "effect"
import { SpentTokenStore } from "../../src/telephony/SpentTokenStore.js"
import { uniqueId } from "../support/testApp.js"

/** What every SpentTokenStore adapter must do (docs/scaling.md, "Session tokens"). */
export const spentTokenStoreContract = (name: string, store: Layer.Layer<SpentTokenStore, unknown>) =>
  describe(`SpentTokenStore contract (${name})`, () => {
    layer(store, { excludeTestServices: true })((it) => {
      it.effect("the first presentation spends a token, every later one is refused", () =>
        Effect.gen(function* () {
          const tokens = yield* SpentTokenStore
          const id = uniqueId("jti")
          const expires = Date.now() + 60_000
          expect(yield* tokens.spend(id, expires)).toBe(true)
          expect(yield* tokens.spend(id, expires)).toBe(false)
          expect(yield* tokens.spend(id, expires)).toBe(false)
          expect(yield* tokens.spend(uniqueId("jti"), expires)).toBe(true)
        }))

      it.effect("of many concurrent presentations of one token exactly one wins", () =>
        Effect.gen(function* () {
          const tokens = yield* SpentTokenStore
          const id = uniqueId("jti")
          const results = yield* Effect.all(
            Array.from({ length: 20 }, () => tokens.spend(id, Date.now() + 60_000)),
            { concurrency: "unbounded" }
          )
          expect(results.filter((first) => first)).toHaveLength(1)
        }))
    })
  })
