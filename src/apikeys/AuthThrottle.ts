import { Effect } from "effect"
import { Counter } from "prom-client"
import { AppConfig } from "../config/AppConfig.js"
import { Metrics } from "../observability/Metrics.js"

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
 * token, or signature) was presented, so guessing keys from one address ends at
 * AUTH_FAILURES_PER_MINUTE. Past it every authentication from that address, valid or not, is
 * refused with 429 until the minute is over. Per instance, in memory.
 */
export class AuthThrottle extends Effect.Service<AuthThrottle>()("callgate/AuthThrottle", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const metrics = yield* Metrics
    const limit = config.authFailuresPerMinute
    const throttled = new Counter({
      name: "callgate_auth_throttled_total",
      help: "Authentications refused because their client address failed too often",
      registers: [metrics.registry]
    })
    const entries = new Map<string, Entry>()
    const now = () => Date.now()

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

    return {
      /** Seconds to wait when `address` is over its failures for the minute; undefined when it may try. */
      retryAfter: (address: string): number | undefined => {
        if (limit === 0) return undefined
        const at = now()
        const entry = current(address, at)
        if (entry === undefined || entry.failures < limit) return undefined
        throttled.inc()
        return Math.max(1, Math.ceil((entry.windowStartMs + WINDOW_MS - at) / 1000))
      },
      /** One refused authentication from `address`. */
      failed: (address: string): void => {
        if (limit === 0) return
        const at = now()
        const entry = current(address, at)
        if (entry === undefined) {
          if (entries.size >= SWEEP_AT) sweep(at)
          entries.set(address, { failures: 1, windowStartMs: at })
        } else entry.failures++
      }
    } as const
  })
}) {}
