import { Deferred, Effect, type Layer, type Scope } from "effect"
import { describe, expect, it } from "vitest"
import { type BreakerTrip, BreakerStore } from "../../src/breaker/BreakerStore.js"
import { uniqueId } from "../support/testApp.js"

/**
 * What every BreakerStore adapter must do, on the real clock (Redis keeps its own time, so this
 * suite cannot use TestClock; the exact window edges are tested on TestClock in Breaker.test.ts).
 */
export const breakerStoreContract = (name: string, layer: () => Layer.Layer<BreakerStore, unknown>) =>
  describe(`BreakerStore contract (${name})`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, BreakerStore>) => Effect.runPromise(Effect.provide(effect, layer()))
    const runScoped = <A, E>(effect: Effect.Effect<A, E, BreakerStore | Scope.Scope>) =>
      Effect.runPromise(Effect.provide(Effect.scoped(effect), layer()))
    const env = () => ({ agentId: uniqueId("agent"), environmentId: uniqueId("env") })

    it("counts one occurrence per session, across sessions", () =>
      run(
        Effect.gen(function* () {
          const store = yield* BreakerStore
          const { agentId, environmentId } = env()
          expect(yield* store.count(agentId, environmentId, 300)).toBe(0)
          expect(yield* store.recordOccurrence(agentId, environmentId, "s1", 300)).toBe(1)
          expect(yield* store.recordOccurrence(agentId, environmentId, "s1", 300)).toBe(1)
          expect(yield* store.recordOccurrence(agentId, environmentId, "s2", 300)).toBe(2)
          expect(yield* store.recordOccurrence(agentId, environmentId, "s1", 300)).toBe(2)
          expect(yield* store.count(agentId, environmentId, 300)).toBe(2)
        })
      ))

    it("keeps environments apart", () =>
      run(
        Effect.gen(function* () {
          const store = yield* BreakerStore
          const a = env()
          const b = { agentId: a.agentId, environmentId: uniqueId("env") }
          yield* store.recordOccurrence(a.agentId, a.environmentId, "s1", 300)
          yield* store.recordOccurrence(a.agentId, a.environmentId, "s2", 300)
          expect(yield* store.recordOccurrence(b.agentId, b.environmentId, "s1", 300)).toBe(1)
          yield* store.clear(b.agentId, b.environmentId)
          expect(yield* store.count(a.agentId, a.environmentId, 300)).toBe(2)
          expect(yield* store.count(b.agentId, b.environmentId, 300)).toBe(0)
        })
      ))

    it("clear forgets every occurrence of the environment", () =>
      run(
        Effect.gen(function* () {
          const store = yield* BreakerStore
          const { agentId, environmentId } = env()
          yield* store.recordOccurrence(agentId, environmentId, "s1", 300)
          yield* store.recordOccurrence(agentId, environmentId, "s2", 300)
          yield* store.clear(agentId, environmentId)
          expect(yield* store.count(agentId, environmentId, 300)).toBe(0)
          expect(yield* store.recordOccurrence(agentId, environmentId, "s3", 300)).toBe(1)
        })
      ))

    it("the probe slot: one holder per interval, kept apart per environment, freed by clear (which reports it held) and by its interval", () =>
      run(
        Effect.gen(function* () {
          const store = yield* BreakerStore
          const { agentId, environmentId } = env()
          const other = env()
          expect(yield* store.probe(agentId, environmentId)).toBeNull()
          expect(yield* store.claimProbe(agentId, environmentId, "p1", 3600)).toBe(true)
          expect(yield* store.claimProbe(agentId, environmentId, "p2", 3600)).toBe(false)
          expect(yield* store.probe(agentId, environmentId)).toBe("p1")
          expect(yield* store.claimProbe(other.agentId, other.environmentId, "q1", 3600)).toBe(true)
          expect(yield* store.clear(agentId, environmentId)).toBe(true)
          expect(yield* store.clear(agentId, environmentId)).toBe(false)
          expect(yield* store.probe(agentId, environmentId)).toBeNull()
          expect(yield* store.probe(other.agentId, other.environmentId)).toBe("q1")
          // A short interval frees the slot by itself (real clock: wait for it, never assert on timing).
          expect(yield* store.claimProbe(agentId, environmentId, "p3", 0.05)).toBe(true)
          let freed = false
          for (let i = 0; i < 200 && !freed; i++) {
            yield* Effect.sleep("20 millis")
            freed = (yield* store.probe(agentId, environmentId)) === null
          }
          expect(freed).toBe(true)
          expect(yield* store.claimProbe(agentId, environmentId, "p4", 3600)).toBe(true)
        })
      ))

    it("drops occurrences older than the window", () =>
      run(
        Effect.gen(function* () {
          const store = yield* BreakerStore
          const { agentId, environmentId } = env()
          expect(yield* store.recordOccurrence(agentId, environmentId, "old", 60)).toBe(1)
          yield* Effect.sleep("300 millis")
          // "old" is at least 300 ms old (a busy machine only makes it older): out of a 200 ms window,
          // and the count that says so also drops it for good.
          expect(yield* store.count(agentId, environmentId, 0.2)).toBe(0)
          // A new occurrence is well inside a minute's window; "old" is gone from it too.
          expect(yield* store.recordOccurrence(agentId, environmentId, "newer", 60)).toBe(1)
          expect(yield* store.count(agentId, environmentId, 60)).toBe(1)
        })
      ))

    it("recording a session again refreshes its time", () =>
      run(
        Effect.gen(function* () {
          const store = yield* BreakerStore
          const { agentId, environmentId } = env()
          yield* store.recordOccurrence(agentId, environmentId, "s1", 60)
          const firstRecorded = Date.now()
          yield* Effect.sleep("1 second")
          const refreshing = Date.now()
          yield* store.recordOccurrence(agentId, environmentId, "s1", 60)
          // A window shorter than the first record's age: only the refresh can keep s1 in it.
          const window = Date.now() - firstRecorded - 100
          const counted = yield* store.count(agentId, environmentId, window / 1000)
          // Decidable only when the refresh is younger than the window (always, unless the machine
          // stalled for most of a second between the two calls).
          if (Date.now() - refreshing < window) expect(counted).toBe(1)
          yield* Effect.sleep("300 millis")
          // Now the refresh is older than 200 ms: out of that window.
          expect(yield* store.count(agentId, environmentId, 0.2)).toBe(0)
        })
      ))

    it("delivers published trips to every subscriber", () =>
      runScoped(
        Effect.gen(function* () {
          const store = yield* BreakerStore
          const { agentId, environmentId } = env()
          const trip: BreakerTrip = { agentId, environmentId, sessionId: "s7", count: 3, threshold: 3, origin: "instance-a" }
          const first = yield* Deferred.make<BreakerTrip>()
          const second = yield* Deferred.make<BreakerTrip>()
          const mine = (deferred: Deferred.Deferred<BreakerTrip>) => (heard: BreakerTrip) => {
            if (heard.agentId === agentId && heard.environmentId === environmentId) Deferred.unsafeDone(deferred, Effect.succeed(heard))
          }
          yield* store.subscribeTrips(mine(first))
          yield* store.subscribeTrips(mine(second))
          yield* store.publishTrip(trip)
          const heard = yield* Effect.all([Deferred.await(first), Deferred.await(second)]).pipe(Effect.timeout("2 seconds"))
          expect(heard).toEqual([trip, trip])
        })
      ))

    it("stops delivering when the subscriber's scope closes", () =>
      runScoped(
        Effect.gen(function* () {
          const store = yield* BreakerStore
          const { agentId, environmentId } = env()
          const heard: Array<BreakerTrip> = []
          const probe = yield* Deferred.make<void>()
          yield* store.subscribeTrips((trip) => {
            if (trip.environmentId === environmentId && trip.sessionId === "probe") Deferred.unsafeDone(probe, Effect.void)
          })
          yield* Effect.scoped(store.subscribeTrips((trip) => void (trip.environmentId === environmentId && heard.push(trip))))
          yield* store.publishTrip({ agentId, environmentId, sessionId: "after-close", count: 1, threshold: 1, origin: "x" })
          yield* store.publishTrip({ agentId, environmentId, sessionId: "probe", count: 1, threshold: 1, origin: "x" })
          yield* Deferred.await(probe).pipe(Effect.timeout("2 seconds"))
          expect(heard).toEqual([])
        })
      ))

    it("state reads the window and the last trip without recording anything", () =>
      run(
        Effect.gen(function* () {
          const store = yield* BreakerStore
          const { agentId, environmentId } = env()
          expect(yield* store.state(agentId, environmentId, 300)).toEqual({ occurrences: 0, newestAt: null, lastTrip: null })
          yield* store.recordOccurrence(agentId, environmentId, "s1", 300)
          const before = Date.now()
          yield* store.recordOccurrence(agentId, environmentId, "s2", 300)
          const after = Date.now()
          const state = yield* store.state(agentId, environmentId, 300)
          expect(state.occurrences).toBe(2)
          expect(state.lastTrip).toBeNull()
          // Stamped by the store's clock (Redis TIME on the same machine) while the call was under way.
          expect(state.newestAt!).toBeGreaterThanOrEqual(before - 1)
          expect(state.newestAt!).toBeLessThanOrEqual(after + 1)
          // Reading twice counts nothing more.
          expect((yield* store.state(agentId, environmentId, 300)).occurrences).toBe(2)
          expect(yield* store.count(agentId, environmentId, 300)).toBe(2)

          const beforeTrip = Date.now()
          yield* store.publishTrip({ agentId, environmentId, sessionId: "s2", count: 2, threshold: 2, origin: "instance-a" })
          const afterTrip = Date.now()
          const tripped = yield* store.state(agentId, environmentId, 300)
          expect(tripped.lastTrip).toMatchObject({ sessionId: "s2", count: 2, threshold: 2 })
          expect(tripped.lastTrip!.at).toBeGreaterThanOrEqual(beforeTrip - 1)
          expect(tripped.lastTrip!.at).toBeLessThanOrEqual(afterTrip + 1)
          // A successful response clears the window; the last trip stays on record.
          yield* store.clear(agentId, environmentId)
          const cleared = yield* store.state(agentId, environmentId, 300)
          expect(cleared.occurrences).toBe(0)
          expect(cleared.newestAt).toBeNull()
          expect(cleared.lastTrip).toEqual(tripped.lastTrip)
          // Another environment's trip is its own.
          const other = env()
          expect((yield* store.state(other.agentId, other.environmentId, 300)).lastTrip).toBeNull()
        })
      ))

    it("state drops occurrences older than the window", () =>
      run(
        Effect.gen(function* () {
          const store = yield* BreakerStore
          const { agentId, environmentId } = env()
          yield* store.recordOccurrence(agentId, environmentId, "old", 0.2)
          yield* Effect.sleep("300 millis")
          expect(yield* store.state(agentId, environmentId, 0.2)).toEqual({ occurrences: 0, newestAt: null, lastTrip: null })
        })
      ))

    it("answers ping", () => run(Effect.flatMap(BreakerStore, (store) => store.ping)))

    it("serves many concurrent sessions with an exact count", () =>
      run(
        Effect.gen(function* () {
          const store = yield* BreakerStore
          const { agentId, environmentId } = env()
          const sessions = Array.from({ length: 200 }, (_, i) => `s${i}`)
          // Every session records three times, all at once: 200 distinct sessions remain.
          const counts = yield* Effect.forEach([...sessions, ...sessions, ...sessions], (s) => store.recordOccurrence(agentId, environmentId, s, 300), {
            concurrency: "unbounded"
          })
          expect(Math.max(...counts)).toBe(200)
          expect(new Set(counts).size).toBeGreaterThan(1)
          expect(yield* store.count(agentId, environmentId, 300)).toBe(200)
        })
      ))
  })
