import { Effect, Layer } from "effect"
import { environmentKey } from "../kernel/EnvironmentKey.js"
import { CallLeaseStore, type LeaseKind } from "./CallLeaseStore.js"

/**
 * The embedded store's call leases: one process, the same rules as the Redis adapter, each
 * operation synchronous on the event loop (so atomic).
 */
export const makeMemoryCallLeaseStore =
  Effect.map(Effect.clock, (clock) => {
    const now = () => clock.unsafeCurrentTimeMillis()
    const environments = new Map<string, Map<string, { kind: LeaseKind; until: number }>>()
    const leasesOf = (agentId: string, environmentId: string) => {
      const key = environmentKey(agentId, environmentId)
      let leases = environments.get(key)
      if (leases === undefined) environments.set(key, (leases = new Map()))
      const at = now()
      for (const [sessionId, lease] of leases) if (lease.until <= at) leases.delete(sessionId)
      return leases
    }
    const counts = (leases: Map<string, { kind: LeaseKind }>) => {
      let outbound = 0
      for (const lease of leases.values()) if (lease.kind === "outbound") outbound++
      return { total: leases.size, outbound }
    }
    return CallLeaseStore.of({
      acquire: ({ agentId, environmentId, sessionId, kind }, limits, ttlMs) =>
        Effect.sync(() => {
          const leases = leasesOf(agentId, environmentId)
          const held = leases.get(sessionId)
          if (held === undefined) {
            const { total, outbound } = counts(leases)
            if (limits.total !== null && total >= limits.total) return { _tag: "Refused", limit: "maxConcurrentCalls", max: limits.total } as const
            if (kind === "outbound" && limits.outbound !== null && outbound >= limits.outbound) {
              return { _tag: "Refused", limit: "maxConcurrentOutboundCalls", max: limits.outbound } as const
            }
          }
          leases.set(sessionId, { kind, until: now() + ttlMs })
          return { _tag: "Granted" } as const
        }),
      renew: (agentId, environmentId, held, ttlMs) =>
        Effect.sync(() => {
          const leases = leasesOf(agentId, environmentId)
          for (const { sessionId } of held) {
            const lease = leases.get(sessionId)
            if (lease !== undefined) lease.until = now() + ttlMs
          }
        }),
      release: (agentId, environmentId, sessionId) =>
        Effect.sync(() => {
          leasesOf(agentId, environmentId).delete(sessionId)
        }),
      count: (agentId, environmentId) => Effect.sync(() => counts(leasesOf(agentId, environmentId)))
    })
  })

export const MemoryCallLeaseStoreLive = Layer.effect(CallLeaseStore, makeMemoryCallLeaseStore)
