import { Duration, Effect, Option } from "effect"
import { AppConfig } from "../config/AppConfig.js"

/**
 * This instance's hold on its live calls (docs/reliability.md, "Fencing"). The fleet counts an
 * instance gone INSTANCE_TTL after its last registry refresh and then rescues its calls; so the
 * instance's hold lasts that long from each refresh the store took (`renewed`, from the
 * registry). It stops taking new calls `margin` before the hold runs out (min(TTL / 2, 3 s)): an
 * instance that cannot refresh (paused, or cut off from the store) is out of placement (and
 * `/readyz`) before the fleet may claim its calls, not after. The hold counts from the moment the
 * entry's write was sent, and the entry is written on a loop of its own (InstanceRegistry), not
 * behind the refresh's other round trips: a store 300 ms away keeps it renewed every
 * REFRESH_INTERVAL plus one round trip.
 * Without a shared store (the embedded one) there is no fleet and the hold never runs out.
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
      /** The store took this instance's registry entry, written at `atMs` (read before the write was sent). */
      renewed: (atMs: number): void => {
        renewedAtMs = Math.max(renewedAtMs, atMs)
      },
      /** Whether the registry listed other live instances at the last refresh. */
      sawOthers: (others: boolean): void => {
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
