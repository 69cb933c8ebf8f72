import { Duration, Effect } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { environmentKey } from "../kernel/EnvironmentKey.js"
import type { StoreError } from "../kernel/StoreError.js"
import { type HeldLease, CallLeaseStore, type LeaseKind, type LeaseLimits, type LeaseVerdict } from "./CallLeaseStore.js"
import { idleTicker } from "../kernel/Tickers.js"

/** As often as an instance refreshes its registry entry (fleet/FleetTiming's REFRESH_INTERVAL). */
const RENEW_INTERVAL = Duration.seconds(2)

interface EnvironmentLeases {
  readonly agentId: string
  readonly environmentId: string
  readonly held: Map<string, HeldLease>
}

/**
 * Fleet-wide call limits (docs/scaling.md, "Fleet-wide call limits"): `maxConcurrentCalls`
 * (inbound and outbound together) and `maxConcurrentOutboundCalls`, counted across every instance
 * through leases in the store. A call takes its lease where it enters (the carrier's entry, or
 * `POST .../calls`); the instance that carries the call holds it (renews it every
 * RENEW_INTERVAL) until the call ends, and releases it then. A lease lives INSTANCE_TTL past its
 * last renewal, so the places of a dead instance's calls come back within INSTANCE_TTL, with no
 * one to clean up. An environment without a limit costs nothing: no lease is taken.
 */
export class CallLeases extends Effect.Service<CallLeases>()("callgate/CallLeases", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const store = yield* CallLeaseStore
    const ttlMs = Duration.toMillis(config.instanceTtl)
    const byEnvironment = new Map<string, EnvironmentLeases>()
    /** Session id -> its environment's key, for the leases this instance holds. */
    const holding = new Map<string, string>()

    /**
     * Takes a place for the session when `limits` allow it. Granted at once when the environment
     * has no limit (nothing is counted then). `hold`: this instance carries the call from now on
     * (an outbound call it places); an inbound call's lease is held by the instance its stream
     * reaches (`hold` below), and lapses if no stream ever does.
     */
    const acquire = (
      lease: { readonly agentId: string; readonly environmentId: string; readonly sessionId: string; readonly kind: LeaseKind },
      limits: LeaseLimits,
      options: { readonly hold: boolean }
    ): Effect.Effect<LeaseVerdict, StoreError> => {
      if (limits.total === null && (lease.kind === "inbound" || limits.outbound === null)) return Effect.succeed({ _tag: "Granted" })
      return store.acquire(lease, limits, ttlMs).pipe(
        Effect.tap((verdict) => (verdict._tag === "Granted" && options.hold ? Effect.sync(() => hold(lease.agentId, lease.environmentId, lease.sessionId, lease.kind)) : Effect.void))
      )
    }

    /** This instance carries the session: its lease (if it has one) is renewed here until `release`. Synchronous. */
    const hold = (agentId: string, environmentId: string, sessionId: string, kind: LeaseKind) => {
      const key = environmentKey(agentId, environmentId)
      let env = byEnvironment.get(key)
      if (env === undefined) byEnvironment.set(key, (env = { agentId, environmentId, held: new Map() }))
      env.held.set(sessionId, { sessionId, kind })
      holding.set(sessionId, key)
      if (byEnvironment.size === 1) renewals.wake()
    }

    /** The call ended: its place is free for the fleet. A store that does not answer lets the lease lapse instead. */
    const release = (agentId: string, environmentId: string, sessionId: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        const key = holding.get(sessionId)
        holding.delete(sessionId)
        const env = key === undefined ? undefined : byEnvironment.get(key)
        env?.held.delete(sessionId)
        if (env !== undefined && env.held.size === 0) byEnvironment.delete(key!)
        return store.release(agentId, environmentId, sessionId).pipe(
          Effect.catchAll((error) => Effect.logWarning("could not release a call's lease; it lapses on its own", { sessionId, error: error.message }))
        )
      })

    /** Renews every lease this instance holds, one store call per environment. */
    const renewAll = Effect.suspend(() =>
      Effect.forEach([...byEnvironment.values()], (env) => store.renew(env.agentId, env.environmentId, [...env.held.values()], ttlMs), {
        discard: true
      })
    ).pipe(Effect.catchAll((error) => Effect.logWarning("could not renew this instance's call leases", { error: error.message })))

    // Renewals run only while this instance holds a lease: an instance whose environments set no
    // limit (most) takes none, and its renewal loop never wakes.
    const renewals = yield* idleTicker({ interval: RENEW_INTERVAL, busy: () => byEnvironment.size > 0, tick: renewAll })

    return {
      acquire,
      hold,
      release,
      /** Places held across the fleet now (tests, the dashboard's future use). */
      count: store.count
    } as const
  })
}) {}
