import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { makeMemorySpentTokenStore, MemorySpentTokenStoreLive } from "../../src/telephony/MemorySpentTokenStore.js"
import { spentTokenStoreContract } from "./SpentTokenStore.contract.js"

spentTokenStoreContract("memory", MemorySpentTokenStoreLive)

it.effect("an entry is forgotten once its token has expired", () =>
  Effect.gen(function* () {
    let now = 1_000_000
    const store = yield* makeMemorySpentTokenStore(() => now)
    expect(yield* store.spend("a", now + 1000)).toBe(true)
    expect(yield* store.spend("a", now + 1000)).toBe(false)
    now += 120_000
    // Past its expiry the signature check refuses the token; the ledger may take it again.
    expect(yield* store.spend("a", now + 1000)).toBe(true)
  }))

