import { describe, expect, it } from "@effect/vitest"
import { Effect, type Scope, TestClock } from "effect"
import { Breaker, type BreakerSettings } from "../../src/breaker/Breaker.js"
import { BreakerStore } from "../../src/breaker/BreakerStore.js"
import { describeNoResponseTrip, type ResponseWatchdog } from "../../src/breaker/ResponseWatchdog.js"
import { Environments } from "../../src/environments/Environments.js"
import { Metrics } from "../../src/observability/Metrics.js"
import { breakerLayer, newEnvironment, type RescueSeen, sessionOf, settingsBox, settle, watch } from "./breakerTestLayer.js"

/**
 * One named test per breaker rule and per limit of docs/turns-and-breaker.md, on TestClock: the watchdogs
 * sleep on the Effect Clock, and the memory store stamps occurrences with it, so every edge is
 * exact to the millisecond.
 */

const SETTINGS: BreakerSettings = { timeoutSeconds: 5, threshold: 5, windowSeconds: 300 }

type Env = { agentId: string; environmentId: string }
type Test<A> = Effect.Effect<A, unknown, Breaker | BreakerStore | Environments | Metrics | Scope.Scope>

const scenario = <A>(name: string, body: () => Test<A>) =>
  it.scoped(name, () => Effect.provide(Effect.asVoid(body()), breakerLayer()))

/** Advances the test clock by `ms` and lets every fiber react. */
const advance = (ms: number) => Effect.zipRight(TestClock.adjust(ms), settle)
const turnEnds = (watchdog: ResponseWatchdog, endedAtMs = 0, detectedAtMs = endedAtMs) =>
  Effect.zipRight(
    Effect.sync(() => watchdog.turnEnded(endedAtMs, detectedAtMs)),
    settle
  )
const count = (env: Env, windowSeconds = 300) => Effect.flatMap(Breaker, (b) => b.count(env.agentId, env.environmentId, windowSeconds))

/** Who was rescued and why, in session order (rescues run concurrently, in no fixed order). */
const bySession = (rescues: ReadonlyArray<RescueSeen>) =>
  rescues.map((r) => [r.sessionId, r.reason]).sort(([x], [y]) => x!.localeCompare(y!))

/** `n` sessions of `env`, each with a watchdog; returns them in order. */
const sessions = (env: Env, n: number, settings: Effect.Effect<BreakerSettings>, rescues: Array<RescueSeen>) =>
  Effect.forEach(Array.from({ length: n }, (_, i) => i), (i) => watch(sessionOf(env, `s${i + 1}`), settings, rescues))

describe("no-response breaker: the breaker rules", () => {
  scenario("rule 1: when the timer expires with the agent silent, one occurrence is recorded", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const [a] = yield* sessions(env, 1, settingsBox(SETTINGS).get, rescues)
      yield* turnEnds(a!)
      yield* advance(4999)
      expect(yield* count(env)).toBe(0)
      yield* advance(1)
      expect(yield* count(env)).toBe(1)
      expect(a!.occurrences).toBe(1)
      expect(rescues).toEqual([])
    }))

  scenario("rule 1: the timer runs from the last voiced caller frame, not from when the turn end was recognised", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const [a] = yield* sessions(env, 1, settingsBox(SETTINGS).get, [])
      // The end-of-turn silence (700 ms) had passed when the turn end was recognised.
      yield* turnEnds(a!, 10_000, 10_700)
      yield* advance(4299)
      expect(yield* count(env)).toBe(0)
      yield* advance(1)
      expect(yield* count(env)).toBe(1)
    }))

  scenario("rule 1: a session contributes at most once, however often its timer expires", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const [a] = yield* sessions(env, 1, settingsBox({ ...SETTINGS, threshold: 2 }).get, rescues)
      yield* turnEnds(a!)
      yield* advance(60_000)
      expect(a!.occurrences).toBe(12)
      expect(yield* count(env)).toBe(1)
      expect(rescues).toEqual([])
    }))

  scenario("rule 1: the timer re-arms, and each later expiry refreshes the session's occurrence", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const settings = settingsBox({ timeoutSeconds: 25, threshold: 2, windowSeconds: 60 }).get
      const [a, b] = yield* sessions(env, 2, settings, rescues)
      yield* turnEnds(a!) // expiries at 25, 50, 75, 100 s
      yield* advance(95_000)
      yield* turnEnds(b!) // expires at 120 s
      yield* advance(25_000)
      // Without the refresh at 100 s, a's occurrence (25 s) would be 95 s old and out of the 60 s window.
      expect(a!.occurrences).toBe(4)
      expect(bySession(rescues)).toEqual([
        ["s1", "environment"],
        ["s2", "threshold"]
      ])
    }))

  scenario("rule 1: below the threshold the call keeps waiting and records further occurrences", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const [a] = yield* sessions(env, 1, settingsBox({ ...SETTINGS, threshold: 3 }).get, rescues)
      yield* turnEnds(a!)
      yield* advance(15_000)
      expect(a!.occurrences).toBe(3)
      expect(a!.rescued).toBe(false)
      expect(rescues).toEqual([])
    }))

  scenario("rule 1: when the count reaches the threshold the fallback runs for that session, once", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const [a, b] = yield* sessions(env, 2, settingsBox({ ...SETTINGS, threshold: 2 }).get, rescues)
      yield* turnEnds(a!)
      yield* advance(1000)
      yield* turnEnds(b!)
      yield* advance(5000)
      expect([...rescues].sort((x, y) => x.sessionId.localeCompare(y.sessionId))).toEqual([
        { sessionId: "s1", reason: "environment", count: 2, threshold: 2, trippedBy: "s2", timeoutSeconds: 5 },
        { sessionId: "s2", reason: "threshold", count: 2, threshold: 2, trippedBy: "s2", timeoutSeconds: 5 }
      ])
      yield* advance(60_000)
      expect(rescues).toHaveLength(2)
      expect(a!.rescued && b!.rescued).toBe(true)
    }))

  scenario("rule 2: a successful agent response clears the environment's occurrences", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const [a, b, c] = yield* sessions(env, 3, settingsBox({ ...SETTINGS, threshold: 3 }).get, rescues)
      yield* turnEnds(a!)
      yield* turnEnds(b!)
      yield* advance(5000)
      expect(yield* count(env)).toBe(2)
      yield* Effect.sync(() => a!.agentResponded())
      yield* settle
      expect(yield* count(env)).toBe(0)
      yield* turnEnds(c!)
      yield* advance(5000)
      // b refreshed its occurrence at 10 s and c recorded one: 2 < 3.
      expect(yield* count(env)).toBe(2)
      expect(rescues).toEqual([])
    }))

  scenario("rule 2: a response after the deadline but before the threshold keeps the call and clears the count", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const [a] = yield* sessions(env, 1, settingsBox({ ...SETTINGS, threshold: 2 }).get, rescues)
      yield* turnEnds(a!)
      yield* advance(6000)
      expect(yield* count(env)).toBe(1)
      yield* Effect.sync(() => a!.agentResponded())
      yield* advance(60_000)
      expect(yield* count(env)).toBe(0)
      expect(a!.rescued).toBe(false)
      // The next turn starts from a clean count.
      yield* turnEnds(a!)
      yield* advance(5000)
      expect(yield* count(env)).toBe(1)
      expect(rescues).toEqual([])
    }))

  scenario("rule 3: occurrences are shared by concurrent sessions of the same environment", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const other = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const settings = settingsBox({ ...SETTINGS, threshold: 3 }).get
      const [a, b, c] = yield* sessions(env, 3, settings, rescues)
      const [elsewhere] = yield* sessions(other, 1, settings, rescues)
      yield* turnEnds(elsewhere!)
      yield* turnEnds(a!)
      yield* advance(100)
      yield* turnEnds(b!)
      yield* advance(100)
      yield* turnEnds(c!)
      yield* advance(4999)
      expect(yield* count(env)).toBe(2)
      expect(rescues).toEqual([])
      yield* advance(1)
      expect(yield* count(env)).toBe(3)
      expect(rescues.map((r) => r.sessionId).sort()).toEqual(["s1", "s2", "s3"])
      expect(yield* count(other)).toBe(1)
      expect(elsewhere!.rescued).toBe(false)
    }))

  scenario("rule 3: a trip rescues the environment's other stalled sessions, not those still within their deadline", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const settings = settingsBox({ ...SETTINGS, threshold: 2 }).get
      const [stalled, answered, tripping, fresh] = yield* sessions(env, 4, settings, rescues)
      yield* turnEnds(stalled!)
      yield* turnEnds(answered!)
      yield* advance(1000)
      yield* turnEnds(tripping!)
      yield* Effect.sync(() => answered!.agentResponded())
      yield* advance(4000)
      expect(yield* count(env)).toBe(1)
      yield* turnEnds(fresh!) // due at 10 s
      yield* advance(1000) // tripping expires at 6 s: 2 occurrences
      expect(bySession(rescues)).toEqual([
        ["s1", "environment"],
        ["s3", "threshold"]
      ])
      expect(answered!.rescued || fresh!.rescued).toBe(false)
    }))

  scenario("rule 3: a trip published by another instance rescues this instance's stalled sessions", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const [a, b] = yield* sessions(env, 2, settingsBox(SETTINGS).get, rescues)
      yield* turnEnds(a!)
      yield* advance(5000)
      yield* turnEnds(b!)
      const store = yield* BreakerStore
      yield* store.publishTrip({ ...env, sessionId: "remote-session", count: 5, threshold: 5, origin: "another-instance" })
      yield* settle
      expect(rescues).toEqual([{ sessionId: "s1", reason: "environment", count: 5, threshold: 5, trippedBy: "remote-session", timeoutSeconds: 5 }])
    }))

  scenario("rule 4: with timeout 0 the no-response trigger is off", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const [a] = yield* sessions(env, 1, settingsBox({ timeoutSeconds: 0, threshold: 1, windowSeconds: 60 }).get, rescues)
      yield* turnEnds(a!)
      yield* advance(3_600_000)
      expect(a!.occurrences).toBe(0)
      expect(yield* count(env)).toBe(0)
      expect(rescues).toEqual([])
    }))

  scenario("caller speech before the answer stops the timer until the new turn ends", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const [a] = yield* sessions(env, 1, settingsBox(SETTINGS).get, [])
      yield* turnEnds(a!)
      yield* advance(4000)
      yield* Effect.sync(() => a!.callerResumed())
      yield* advance(10_000)
      expect(yield* count(env)).toBe(0)
      yield* turnEnds(a!)
      yield* advance(5000)
      expect(yield* count(env)).toBe(1)
    }))

  scenario("agent audio that has just started holds the count until it is judged", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      let starting = true
      const a = yield* watch(sessionOf(env, "s1"), settingsBox(SETTINGS).get, [], { agentStarting: () => starting })
      yield* turnEnds(a)
      yield* advance(5060)
      expect(yield* count(env)).toBe(0)
      // It was only noise: the deadline counts as soon as that is known.
      starting = false
      yield* advance(20)
      expect(yield* count(env)).toBe(1)
    }))

  scenario("settings changed through /v1 apply to the next evaluation without a restart", () =>
    Effect.gen(function* () {
      const environments = yield* Environments
      const breaker = yield* Breaker
      const { agentId } = newEnvironment()
      const created = yield* environments.create(agentId, {
        name: "production",
        errorFallbackTimeout: 5,
        errorFallbackOccurrenceThreshold: 3,
        errorFallbackTimeWindow: 300
      })
      const env = { agentId, environmentId: created.id }
      const rescues: Array<RescueSeen> = []
      const a = yield* watch(sessionOf(env, "s1"), breaker.settingsFor(agentId, created.id), rescues)
      yield* turnEnds(a)
      yield* advance(5000)
      expect(yield* count(env)).toBe(1)
      expect(rescues).toEqual([])
      yield* environments.update(agentId, created.id, { errorFallbackOccurrenceThreshold: 1 })
      yield* advance(5000)
      expect(rescues.map((r) => [r.sessionId, r.reason, r.threshold])).toEqual([["s1", "threshold", 1]])
    }))

  scenario("setting the timeout to 0 through /v1 stops the counting at the next evaluation", () =>
    Effect.gen(function* () {
      const environments = yield* Environments
      const breaker = yield* Breaker
      const { agentId } = newEnvironment()
      const created = yield* environments.create(agentId, { name: "production", errorFallbackTimeout: 5 })
      const a = yield* watch(sessionOf({ agentId, environmentId: created.id }, "s1"), breaker.settingsFor(agentId, created.id), [])
      yield* turnEnds(a)
      yield* advance(5000)
      expect(a.occurrences).toBe(1)
      yield* environments.update(agentId, created.id, { errorFallbackTimeout: 0 })
      yield* advance(60_000)
      expect(a.occurrences).toBe(1)
    }))
})

describe("no-response breaker: the settings limits", () => {
  scenario("the defaults (timeout 0, threshold 5, window 300) leave the trigger off", () =>
    Effect.gen(function* () {
      const environments = yield* Environments
      const breaker = yield* Breaker
      const { agentId } = newEnvironment()
      const created = yield* environments.create(agentId, { name: "fresh" })
      const settings = yield* breaker.settingsFor(agentId, created.id)
      expect(settings).toEqual({ timeoutSeconds: 0, threshold: 5, windowSeconds: 300 })
      const a = yield* watch(sessionOf({ agentId, environmentId: created.id }), breaker.settingsFor(agentId, created.id), [])
      yield* turnEnds(a)
      yield* advance(3_600_000)
      expect(a.occurrences).toBe(0)
    }))

  scenario("timeout 30 (the maximum) waits the full 30 seconds", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const [a] = yield* sessions(env, 1, settingsBox({ ...SETTINGS, timeoutSeconds: 30 }).get, [])
      yield* turnEnds(a!)
      yield* advance(29_999)
      expect(yield* count(env)).toBe(0)
      yield* advance(1)
      expect(yield* count(env)).toBe(1)
    }))

  scenario("timeout 1 (the smallest enabled) counts after one second", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const [a] = yield* sessions(env, 1, settingsBox({ ...SETTINGS, timeoutSeconds: 1 }).get, [])
      yield* turnEnds(a!)
      yield* advance(999)
      expect(yield* count(env)).toBe(0)
      yield* advance(1)
      expect(yield* count(env)).toBe(1)
    }))

  scenario("threshold 1 (the minimum): the first occurrence trips and rescues the session", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const [a] = yield* sessions(env, 1, settingsBox({ ...SETTINGS, threshold: 1 }).get, rescues)
      yield* turnEnds(a!)
      yield* advance(4999)
      expect(rescues).toEqual([])
      yield* advance(1)
      expect(rescues).toEqual([{ sessionId: "s1", reason: "threshold", count: 1, threshold: 1, trippedBy: "s1", timeoutSeconds: 5 }])
    }))

  scenario("threshold 20 (the maximum): 19 stalled sessions keep waiting, the 20th trips and rescues them all", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const rescues: Array<RescueSeen> = []
      const all = yield* sessions(env, 20, settingsBox({ ...SETTINGS, threshold: 20 }).get, rescues)
      for (const session of all) {
        yield* turnEnds(session)
        yield* advance(10)
      }
      // Session i (1-based) is due at 5000 + (i - 1) * 10 ms; now is 200 ms.
      yield* advance(4980)
      expect(yield* count(env)).toBe(19)
      expect(rescues).toEqual([])
      yield* advance(10)
      expect(rescues.find((r) => r.sessionId === "s20")).toEqual({ sessionId: "s20", reason: "threshold", count: 20, threshold: 20, trippedBy: "s20", timeoutSeconds: 5 })
      expect(bySession(rescues)).toEqual(
        all.map((_, i) => [`s${i + 1}`, i === 19 ? "threshold" : "environment"]).sort(([x], [y]) => x!.localeCompare(y!))
      )
    }))

  for (const windowSeconds of [60, 3600]) {
    const edge = (pastMs: number) =>
      Effect.gen(function* () {
        const env = newEnvironment()
        const rescues: Array<RescueSeen> = []
        const [a, b] = yield* sessions(env, 2, settingsBox({ timeoutSeconds: 5, threshold: 2, windowSeconds }).get, rescues)
        yield* turnEnds(a!)
        yield* advance(5000) // a's occurrence at 5 s
        yield* Effect.sync(() => a!.callerResumed()) // a stops timing; its occurrence stays
        yield* advance(windowSeconds * 1000 - 5000 + pastMs)
        yield* turnEnds(b!) // b's occurrence at 5 s + window + pastMs
        yield* advance(5000)
        return { rescues, b: b! }
      })

    scenario(`window ${windowSeconds} s edge: an occurrence exactly ${windowSeconds} s old still counts`, () =>
      Effect.gen(function* () {
        const { b, rescues } = yield* edge(0)
        expect(b.rescued).toBe(true)
        expect(rescues[0]!.count).toBe(2)
      }))

    scenario(`window ${windowSeconds} s edge: an occurrence 1 ms older than ${windowSeconds} s is dropped`, () =>
      Effect.gen(function* () {
        const { b, rescues } = yield* edge(1)
        expect(b.occurrences).toBe(1)
        expect(b.rescued).toBe(false)
        expect(rescues).toEqual([])
      }))
  }
})

describe("rescue description", () => {
  it("says what happened in one sentence, without ids", () => {
    expect(describeNoResponseTrip({ reason: "environment", count: 5, threshold: 5, trippedBy: "ses_secretish", timeoutSeconds: 8 })).toBe(
      "The agent did not begin responding within 8 s of the caller's input: 5 no-response occurrences in the environment's time window reached the threshold of 5."
    )
    expect(describeNoResponseTrip({ reason: "threshold", count: 1, threshold: 1, trippedBy: "s", timeoutSeconds: 3 })).toContain("1 no-response occurrence in")
  })
})

describe("no-response breaker: metrics", () => {
  scenario("occurrences and trips are counted per agent and environment", () =>
    Effect.gen(function* () {
      const env = newEnvironment()
      const [a] = yield* sessions(env, 1, settingsBox({ ...SETTINGS, threshold: 2 }).get, [])
      yield* turnEnds(a!)
      yield* advance(10_000)
      const { registry } = yield* Metrics
      const text = yield* Effect.promise(() => registry.metrics())
      const labels = `agent="${env.agentId}",environment="${env.environmentId}"`
      expect(text).toContain(`callgate_breaker_occurrences_total{${labels}} 2`)
      expect(text).not.toContain(`callgate_breaker_trips_total{${labels}}`)
    }))
})
