import { describe, expect, layer } from "@effect/vitest"
import { Effect, type Layer, Schedule } from "effect"
import { CallLeaseStore } from "../../src/sessions/CallLeaseStore.js"
import { uniqueId } from "../support/testApp.js"

const LONG = 60_000

/** Polls the environment's count until `check` holds (a lease lapsing is an event in the store's clock). */
const countUntil = (agentId: string, environmentId: string, check: (counts: { total: number; outbound: number }) => boolean) =>
  Effect.flatMap(CallLeaseStore, (store) =>
    store.count(agentId, environmentId).pipe(
      Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: check })
    )
  )

/** What every CallLeaseStore adapter must do (docs/scaling.md, "Fleet-wide call limits"). */
export const callLeaseStoreContract = (name: string, store: Layer.Layer<CallLeaseStore, unknown>) =>
  describe(`CallLeaseStore contract (${name})`, () => {
    layer(store, { excludeTestServices: true })((it) => {
      it.effect("maxConcurrentCalls counts every call; a session holding a place keeps it; a release frees one", () =>
        Effect.gen(function* () {
          const leases = yield* CallLeaseStore
          const [agentId, environmentId] = [uniqueId("a"), uniqueId("e")]
          const take = (sessionId: string, kind: "inbound" | "outbound" = "inbound") =>
            leases.acquire({ agentId, environmentId, sessionId, kind }, { total: 2, outbound: 10 }, LONG)
          expect(yield* take("s1")).toEqual({ _tag: "Granted" })
          expect(yield* take("s2", "outbound")).toEqual({ _tag: "Granted" })
          expect(yield* take("s3")).toEqual({ _tag: "Refused", limit: "maxConcurrentCalls", max: 2 })
          expect(yield* take("s1")).toEqual({ _tag: "Granted" })
          expect(yield* leases.count(agentId, environmentId)).toEqual({ total: 2, outbound: 1 })
          yield* leases.release(agentId, environmentId, "s2")
          expect(yield* leases.count(agentId, environmentId)).toEqual({ total: 1, outbound: 0 })
          expect(yield* take("s3")).toEqual({ _tag: "Granted" })
          // Another environment counts on its own.
          expect(yield* leases.acquire({ agentId, environmentId: uniqueId("other"), sessionId: "s9", kind: "inbound" }, { total: 1, outbound: null }, LONG)).toEqual({ _tag: "Granted" })
        })
      )

      it.effect("maxConcurrentOutboundCalls counts outbound calls only; null is no limit", () =>
        Effect.gen(function* () {
          const leases = yield* CallLeaseStore
          const [agentId, environmentId] = [uniqueId("a"), uniqueId("e")]
          const take = (sessionId: string, kind: "inbound" | "outbound") =>
            leases.acquire({ agentId, environmentId, sessionId, kind }, { total: null, outbound: 1 }, LONG)
          expect(yield* take("o1", "outbound")).toEqual({ _tag: "Granted" })
          expect(yield* take("o2", "outbound")).toEqual({ _tag: "Refused", limit: "maxConcurrentOutboundCalls", max: 1 })
          expect(yield* take("i1", "inbound")).toEqual({ _tag: "Granted" })
          expect(yield* take("i2", "inbound")).toEqual({ _tag: "Granted" })
          expect(yield* leases.count(agentId, environmentId)).toEqual({ total: 3, outbound: 1 })
        })
      )

      it.effect("a lease nobody renews lapses and its place comes back", () =>
        Effect.gen(function* () {
          const leases = yield* CallLeaseStore
          const [agentId, environmentId] = [uniqueId("a"), uniqueId("e")]
          const limits = { total: 1, outbound: 1 }
          expect(yield* leases.acquire({ agentId, environmentId, sessionId: "dead", kind: "outbound" }, limits, 100)).toEqual({ _tag: "Granted" })
          yield* countUntil(agentId, environmentId, (c) => c.total === 0 && c.outbound === 0)
          expect(yield* leases.acquire({ agentId, environmentId, sessionId: "next", kind: "outbound" }, limits, LONG)).toEqual({ _tag: "Granted" })
        })
      )

      it.effect("renew sets the expiry of the leases still held and brings none back", () =>
        Effect.gen(function* () {
          const leases = yield* CallLeaseStore
          const [agentId, environmentId] = [uniqueId("a"), uniqueId("e")]
          const limits = { total: 5, outbound: 5 }
          for (const sessionId of ["r1", "r2", "gone"]) yield* leases.acquire({ agentId, environmentId, sessionId, kind: "outbound" }, limits, LONG)
          yield* leases.release(agentId, environmentId, "gone")
          // Renewed to a long life: r1 and r2 stay; the released one does not come back.
          yield* leases.renew(agentId, environmentId, [{ sessionId: "r1", kind: "outbound" }, { sessionId: "r2", kind: "outbound" }, { sessionId: "gone", kind: "outbound" }], LONG)
          expect(yield* leases.count(agentId, environmentId)).toEqual({ total: 2, outbound: 2 })
          // Renewed to a short one, r1 lapses on its own while r2 keeps its long life.
          yield* leases.renew(agentId, environmentId, [{ sessionId: "r1", kind: "outbound" }], 50)
          yield* countUntil(agentId, environmentId, (c) => c.total === 1)
          expect(yield* leases.count(agentId, environmentId)).toEqual({ total: 1, outbound: 1 })
        })
      )
    })
  })
