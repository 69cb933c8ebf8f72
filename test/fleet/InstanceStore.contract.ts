import { describe, expect, layer } from "@effect/vitest"
import { Effect, type Layer, Option } from "effect"
import { type InstanceReport, InstanceStore } from "../../src/fleet/InstanceStore.js"
import { uniqueId } from "../support/testApp.js"

const report = (id: string, overrides: Partial<InstanceReport> = {}): InstanceReport => ({
  id,
  publicUrl: `https://${id}.callgate.test`,
  draining: false,
  liveCalls: 0,
  startedAt: new Date().toISOString(),
  idleAgents: [],
  ...overrides
})

const GONE = 10_000
const HOLD = 10_000

/** What every InstanceStore adapter must do (docs/scaling.md, "The instance registry", "Placement"). */
export const instanceStoreContract = (name: string, store: Layer.Layer<InstanceStore, unknown>) =>
  describe(`InstanceStore contract (${name})`, () => {
    layer(store, { excludeTestServices: true })((it) => {
      it.effect("lists reported instances until they withdraw", () =>
        Effect.gen(function* () {
          const instances = yield* InstanceStore
          const [a, b] = [uniqueId("a"), uniqueId("b")]
          yield* instances.report(report(a, { liveCalls: 3 }), GONE)
          yield* instances.report(report(b, { draining: true }), GONE)
          const listed = yield* instances.list(GONE)
          expect(listed.find((e) => e.id === a)).toMatchObject({ id: a, liveCalls: 3, draining: false, publicUrl: `https://${a}.callgate.test` })
          expect(listed.find((e) => e.id === b)).toMatchObject({ draining: true })
          yield* instances.withdraw(a, [])
          expect((yield* instances.list(GONE)).map((e) => e.id)).not.toContain(a)
        }))

      it.effect("an instance silent for longer than the gone-after period is not listed", () =>
        Effect.gen(function* () {
          const instances = yield* InstanceStore
          const a = uniqueId("a")
          yield* instances.report(report(a), GONE)
          yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 30)))
          expect((yield* instances.list(GONE)).map((e) => e.id)).toContain(a)
          expect((yield* instances.list(1)).map((e) => e.id)).not.toContain(a)
        }))

      it.effect("an instance that stopped refreshing without withdrawing is silent; a live or withdrawn one is not", () =>
        Effect.gen(function* () {
          const instances = yield* InstanceStore
          const [dead, left, live] = [uniqueId("dead"), uniqueId("left"), uniqueId("live")]
          yield* instances.report(report(dead), GONE)
          yield* instances.report(report(left), GONE)
          yield* instances.withdraw(left, [])
          // Both are now at least 50 ms old (a busy machine only makes them older).
          yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))
          yield* instances.report(report(live), GONE)
          const silent = yield* instances.silent(40)
          expect(silent).toContain(dead)
          expect(silent).not.toContain(left)
          // Within a long gone-after period nothing is silent yet.
          expect(yield* instances.silent(GONE)).not.toContain(dead)
        }))

      it.effect("reserves the preferred instance's agents first, then the instance with the most, each socket once", () =>
        Effect.gen(function* () {
          const instances = yield* InstanceStore
          const agentId = uniqueId("agent")
          const environmentId = "env_main"
          const [a, b, c] = [uniqueId("a"), uniqueId("b"), uniqueId("c")]
          yield* instances.publishIdle(a, { agentId, environmentId, sockets: [`${a}.1`] })
          yield* instances.publishIdle(b, { agentId, environmentId, sockets: [`${b}.1`, `${b}.2`, `${b}.3`] })
          yield* instances.publishIdle(c, { agentId, environmentId, sockets: [`${c}.1`, `${c}.2`] })
          const taken: Array<string> = []
          const reserve = (preferred: string) =>
            Effect.map(instances.reserve(agentId, environmentId, preferred, HOLD, GONE), (r) => {
              if (Option.isSome(r)) taken.push(r.value.socketId)
              return Option.map(r, (x) => x.instanceId)
            })
          expect(yield* reserve(a)).toEqual(Option.some(a))
          // a has no free socket left: the most free is b (3), then b and c tie at 2 (lower id first), ...
          expect(yield* reserve(a)).toEqual(Option.some(b))
          const rest = yield* Effect.all([reserve(a), reserve(a), reserve(a), reserve(a)])
          expect(rest.every(Option.isSome)).toBe(true)
          expect(yield* reserve(a)).toEqual(Option.none())
          expect(new Set(taken).size).toBe(6)
        }))

      it.effect("never reserves on the instance to avoid (one that takes no new calls), even when it has the most or is preferred", () =>
        Effect.gen(function* () {
          const instances = yield* InstanceStore
          const agentId = uniqueId("agent")
          const environmentId = "env_main"
          const [a, b] = [uniqueId("a"), uniqueId("b")]
          yield* instances.publishIdle(a, { agentId, environmentId, sockets: [`${a}.1`, `${a}.2`, `${a}.3`] })
          yield* instances.publishIdle(b, { agentId, environmentId, sockets: [`${b}.1`] })
          const reserve = (preferred: string) =>
            Effect.map(instances.reserve(agentId, environmentId, preferred, HOLD, GONE, a), (r) => Option.map(r, (x) => x.instanceId))
          expect(yield* reserve(a)).toEqual(Option.some(b))
          expect(yield* reserve("")).toEqual(Option.none())
          // Without it, a's sockets are there as before.
          expect(Option.map(yield* instances.reserve(agentId, environmentId, "", HOLD, GONE), (x) => x.instanceId)).toEqual(Option.some(a))
        }))

      it.effect("of concurrent reservations each gets its own socket, and none beyond capacity", () =>
        Effect.gen(function* () {
          const instances = yield* InstanceStore
          const agentId = uniqueId("agent")
          const a = uniqueId("a")
          yield* instances.publishIdle(a, { agentId, environmentId: "env_main", sockets: Array.from({ length: 10 }, (_, i) => `${a}.${i}`) })
          const results = yield* Effect.all(
            Array.from({ length: 25 }, () => instances.reserve(agentId, "env_main", "elsewhere", HOLD, GONE)),
            { concurrency: "unbounded" }
          )
          const sockets = results.filter(Option.isSome).map((r) => r.value.socketId)
          expect(sockets).toHaveLength(10)
          expect(new Set(sockets).size).toBe(10)
        }))

      it.effect("a hold lapses: the socket is free again", () =>
        Effect.gen(function* () {
          const instances = yield* InstanceStore
          const agentId = uniqueId("agent")
          const a = uniqueId("a")
          yield* instances.publishIdle(a, { agentId, environmentId: "env_main", sockets: [`${a}.1`] })
          expect(Option.isSome(yield* instances.reserve(agentId, "env_main", a, 20, GONE))).toBe(true)
          expect(Option.isSome(yield* instances.reserve(agentId, "env_main", a, 20, GONE))).toBe(false)
          for (;;) {
            const again = yield* instances.reserve(agentId, "env_main", a, HOLD, GONE)
            if (Option.isSome(again)) return expect(again.value.socketId).toBe(`${a}.1`)
            yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 5)))
          }
        }))

      it.effect("a republished list replaces the instance's sockets; sockets of a silent instance are never reserved", () =>
        Effect.gen(function* () {
          const instances = yield* InstanceStore
          const agentId = uniqueId("agent")
          const a = uniqueId("a")
          yield* instances.publishIdle(a, { agentId, environmentId: "env_main", sockets: [`${a}.1`, `${a}.2`] })
          yield* instances.publishIdle(a, { agentId, environmentId: "env_main", sockets: [`${a}.2`] })
          const one = yield* instances.reserve(agentId, "env_main", a, HOLD, GONE)
          expect(Option.map(one, (r) => r.socketId)).toEqual(Option.some(`${a}.2`))
          yield* instances.publishIdle(a, { agentId, environmentId: "env_main", sockets: [`${a}.3`] })
          yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 30)))
          expect(yield* instances.reserve(agentId, "env_main", a, HOLD, 1)).toEqual(Option.none())
          yield* instances.withdraw(a, [{ agentId, environmentId: "env_main" }])
          expect(yield* instances.reserve(agentId, "env_main", a, HOLD, GONE)).toEqual(Option.none())
        }))
    })
  })
