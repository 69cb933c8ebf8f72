import { expect, it } from "@effect/vitest"
import { Clock, Effect, TestClock } from "effect"
import { makeMemorySpentTokenStore, MemorySpentTokenStoreLive } from "../../src/telephony/MemorySpentTokenStore.js"
import { spentTokenStoreContract } from "./SpentTokenStore.contract.js"

spentTokenStoreContract("memory", MemorySpentTokenStoreLive)

it.effect("an entry is forgotten once its token has expired, on the Clock (TestClock)", () =>
  Effect.gen(function* () {
    const store = yield* makeMemorySpentTokenStore
    const expiresAt = (yield* Clock.currentTimeMillis) + 1000
    expect(yield* store.spend("a", expiresAt)).toBe(true)
    // Not yet expired: a second spend is refused, also a millisecond before the expiry.
    yield* TestClock.adjust("999 millis")
    expect(yield* store.spend("a", expiresAt)).toBe(false)
    yield* TestClock.adjust("1 millis")
    // At its expiry the signature check refuses the token; the ledger may take it again.
    expect(yield* store.spend("a", expiresAt + 1000)).toBe(true)
    expect(yield* store.spend("a", expiresAt + 1000)).toBe(false)
  }))
