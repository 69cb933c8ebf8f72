import { Duration, Effect, Option } from "effect"
import { AppConfig } from "../config/AppConfig.js"

/**
 * This instance's hold on its live calls (docs/reliability.md, "Fencing"). The fleet counts an
 * instance gone INSTANCE_TTL after its last registry refresh and then rescues its calls; so the
 * instance's hold lasts that long from each refresh the store took (`renewed`, from the
 * registry). It stops taking new calls `margin` before the hold runs out (min(TTL / 2, 3 s)): an
 * instance that cannot refresh (paused, or cut off from the store) is out of placement before the
 * fleet may claim its calls, not after. Without a shared store (the embedded one) there is no
 * fleet and the hold never runs out.
 */
export class OwnershipLease extends Effect.Service<OwnershipLease>()("callgate/OwnershipLease", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const clock = yield* Effect.clock
    const shared = Option.isSome(config.redisUrl)
    const ttlMs = Duration.toMillis(config.instanceTtl)
    const marginMs = Math.min(ttlMs / 2, 3000)
    let renewedAtMs = clock.unsafeCurrentTimeMillis()
    let othersLive = false
    const remainingMs = () => (shared ? renewedAtMs + ttlMs - clock.unsafeCurrentTimeMillis() : Infinity)
    return {
      /** The registry refresh was written at `atMs` (taken before the write); `others`: other live instances were listed. */
      renewed: (atMs: number, others: boolean): void => {
        renewedAtMs = Math.max(renewedAtMs, atMs)
        othersLive = others
      },
      /** Milliseconds before the fleet may count this instance gone (Infinity without a shared store). */
      remainingMs,
      /** Whether it takes new calls: its hold has more than the margin left. */
      takesCalls: (): boolean => remainingMs() > marginMs,
      /**
       * Whether it may act on its own calls when the store cannot say who holds them: while its hold
       * lasts, or when no other instance was live at its last refresh (no one else would rescue them).
       */
      mayActAlone: (): boolean => remainingMs() > 0 || !othersLive
    } as const
  })
}) {}
