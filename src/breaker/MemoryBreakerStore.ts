import { Clock, Effect, Layer } from "effect"
import { type BreakerTrip, BreakerStore, LAST_TRIP_RETENTION_SECONDS, type LastTrip } from "./BreakerStore.js"
import { environmentKey } from "../kernel/EnvironmentKey.js"


/**
 * The embedded breaker store: windows in a Map, trips delivered to this process's subscribers.
 * Time is the Effect Clock, so tests drive it with TestClock. Also the breaker's local fallback
 * window while Redis is unreachable.
 */
export const makeMemoryBreakerStore = Effect.sync(() => {
  /** Per environment: session id -> when its occurrence was (last) recorded, ms. */
  const windows = new Map<string, Map<string, number>>()
  const subscribers = new Set<(trip: BreakerTrip) => void>()
  /** Per environment: its last trip. */
  const lastTrips = new Map<string, LastTrip>()
  /** Per environment: the probe slot's holder and when it frees itself (ms). */
  const probes = new Map<string, { readonly sessionId: string; readonly until: number }>()
  const heldProbe = (key: string, now: number) => {
    const held = probes.get(key)
    if (held !== undefined && held.until <= now) probes.delete(key)
    return probes.get(key)
  }

  /** Drops entries older than the window; forgets the environment when nothing is left. */
  const trim = (key: string, now: number, windowSeconds: number) => {
    const window = windows.get(key)
    if (window === undefined) return 0
    const oldest = now - windowSeconds * 1000
    for (const [sessionId, at] of window) if (at < oldest) window.delete(sessionId)
    if (window.size === 0) windows.delete(key)
    return window.size
  }

  return BreakerStore.of({
    inProcess: true,
    recordOccurrence: (agentId, environmentId, sessionId, windowSeconds) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const key = environmentKey(agentId, environmentId)
        let window = windows.get(key)
        if (window === undefined) windows.set(key, (window = new Map()))
        // Delete first so a refreshed session moves to the end (iteration order = age order).
        window.delete(sessionId)
        window.set(sessionId, now)
        return trim(key, now, windowSeconds)
      }),
    count: (agentId, environmentId, windowSeconds) =>
      Effect.map(Clock.currentTimeMillis, (now) => trim(environmentKey(agentId, environmentId), now, windowSeconds)),
    state: (agentId, environmentId, windowSeconds) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const key = environmentKey(agentId, environmentId)
        const occurrences = trim(key, now, windowSeconds)
        let newestAt: number | null = null
        for (const at of windows.get(key)?.values() ?? []) newestAt = Math.max(newestAt ?? at, at)
        const last = lastTrips.get(key)
        if (last !== undefined && now - last.at > LAST_TRIP_RETENTION_SECONDS * 1000) lastTrips.delete(key)
        return { occurrences, newestAt, lastTrip: lastTrips.get(key) ?? null }
      }),
    claimProbe: (agentId, environmentId, sessionId, intervalSeconds) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const key = environmentKey(agentId, environmentId)
        if (heldProbe(key, now) !== undefined) return false
        probes.set(key, { sessionId, until: now + Math.max(1, Math.round(intervalSeconds * 1000)) })
        return true
      }),
    probe: (agentId, environmentId) =>
      Effect.map(Clock.currentTimeMillis, (now) => heldProbe(environmentKey(agentId, environmentId), now)?.sessionId ?? null),
    clear: (agentId, environmentId) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const key = environmentKey(agentId, environmentId)
        const probing = heldProbe(key, now) !== undefined
        windows.delete(key)
        probes.delete(key)
        return probing
      }),
    publishTrip: (trip) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        lastTrips.set(environmentKey(trip.agentId, trip.environmentId), {
          at: now,
          sessionId: trip.sessionId,
          count: trip.count,
          threshold: trip.threshold
        })
        for (const handler of [...subscribers]) handler(trip)
      }),
    subscribeTrips: (handler) =>
      Effect.acquireRelease(
        Effect.sync(() => void subscribers.add(handler)),
        () => Effect.sync(() => void subscribers.delete(handler))
      ),
    ping: Effect.void
  })
})

export const MemoryBreakerStoreLive = Layer.effect(BreakerStore, makeMemoryBreakerStore)
