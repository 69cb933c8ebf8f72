import { Effect, Layer } from "effect"
import { SpentTokenStore } from "./SpentTokenStore.js"

/** The embedded store's spent tokens: one process, so a Map pruned of expired ids as it grows. */
export const makeMemorySpentTokenStore =
  Effect.map(Effect.clock, (clock) => {
    const now = () => clock.unsafeCurrentTimeMillis()
    const spent = new Map<string, number>()
    let nextPrune = 0
    const prune = (at: number) => {
      if (at < nextPrune) return
      nextPrune = at + 60_000
      for (const [id, expiresAt] of spent) if (expiresAt <= at) spent.delete(id)
    }
    return SpentTokenStore.of({
      spend: (tokenId, expiresAtMs) =>
        Effect.sync(() => {
          const at = now()
          prune(at)
          const known = spent.get(tokenId)
          if (known !== undefined && known > at) return false
          spent.set(tokenId, expiresAtMs)
          return true
        })
    })
  })

export const MemorySpentTokenStoreLive = Layer.effect(SpentTokenStore, makeMemorySpentTokenStore)
