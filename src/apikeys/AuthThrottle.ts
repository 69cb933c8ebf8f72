import { Effect } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { counterOn, Metrics } from "../observability/Metrics.js"

const WINDOW_MS = 60_000
/** Beyond this many tracked addresses, expired entries are swept at once. */
const SWEEP_AT = 10_000

interface Entry {
  failures: number
  windowStartMs: number
}

/**
 * Failed authentications per client address (docs/security.md, "Authentication throttling"):
 * any route and any socket that refuses credentials reports the failure here, whatever key (or
 * token, or signature) was presented. Past AUTH_FAILURES_PER_MINUTE a refused attempt from that
 * address is answered 429 with Retry-After until the minute is over. Credentials
 * are always checked first: a request that authenticates is answered normally whatever its
 * address's failures, so one party's bad signatures (Twilio's webhooks and streams come from a
 * shared pool of addresses) never lock out another's real calls. Per instance, in memory.
 */
export class AuthThrottle extends Effect.Service<AuthThrottle>()("callgate/AuthThrottle", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const metrics = yield* Metrics
    const limit = config.authFailuresPerMinute
    const throttled = counterOn(metrics.registry, "callgate_auth_throttled_total", "Authentications refused because their client address failed too often")
    const entries = new Map<string, Entry>()
    const clock = yield* Effect.clock
    const now = () => clock.unsafeCurrentTimeMillis()

    const current = (address: string, at: number): Entry | undefined => {
      const entry = entries.get(address)
      if (entry !== undefined && at - entry.windowStartMs >= WINDOW_MS) {
        entries.delete(address)
        return undefined
      }
      return entry
    }

    const sweep = (at: number) => {
      for (const [address, entry] of entries) if (at - entry.windowStartMs >= WINDOW_MS) entries.delete(address)
    }

    /** One refused authentication from `address`: the seconds to wait once it is past its limit. */
    const refused = (address: string): number | undefined => {
      if (limit === 0) return undefined
      const at = now()
      const entry = current(address, at)
      if (entry === undefined) {
        if (entries.size >= SWEEP_AT) sweep(at)
        entries.set(address, { failures: 1, windowStartMs: at })
        return undefined
      }
      entry.failures++
      if (entry.failures <= limit) return undefined
      throttled.inc()
      return Math.max(1, Math.ceil((entry.windowStartMs + WINDOW_MS - at) / 1000))
    }

    return {
      /**
       * One refused authentication from `address` (a bad key, signature or token, already checked):
       * undefined while the address is within AUTH_FAILURES_PER_MINUTE (answer 401), else the
       * seconds until its minute is over (answer 429 with Retry-After).
       */
      refused,
      /** One refused authentication from `address`, where the answer does not depend on it (a stream closed). */
      failed: (address: string): void => void refused(address)
    } as const
  })
}) {}
