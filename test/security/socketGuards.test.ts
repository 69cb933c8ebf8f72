import { it } from "@effect/vitest"
import { Effect, Layer, TestClock } from "effect"
import { describe, expect, it as plainIt } from "vitest"
import { FoundationLive } from "../../src/layers.js"
import { type GateLimit, SocketGate } from "../../src/websocket/SocketGate.js"
import { SocketGuards } from "../../src/websocket/SocketGuards.js"
import { testConfigLayer } from "../support/testApp.js"

const guardsLayer = (env: Record<string, string> = {}) =>
  SocketGuards.Default.pipe(
    Layer.provide(FoundationLive),
    Layer.provide(testConfigLayer({ LOG_LEVEL: "none", ...env }))
  )

const watch = (gate: { onExpire: ((limit: GateLimit, reason: string) => void) | undefined }) => {
  const expired: Array<GateLimit> = []
  gate.onExpire = (limit) => expired.push(limit)
  return expired
}

/** The per-socket limits on the Effect Clock: every deadline is driven by TestClock, never by waiting. */
describe("SocketGuards (TestClock)", () => {
  it.scoped("a carrier stream not authenticated within HANDSHAKE_TIMEOUT expires; an authenticated one does not", () =>
    Effect.gen(function* () {
      const guards = yield* SocketGuards
      const silent = guards.gate("carrier")
      silent.authenticated = () => false
      const started = guards.gate("carrier")
      let authenticated = false
      started.authenticated = () => authenticated
      const silentExpired = watch(silent)
      const startedExpired = watch(started)
      yield* TestClock.adjust("4900 millis")
      expect(silentExpired).toEqual([])
      authenticated = true
      // Keep the authenticated stream's frames coming so the idle limit stays away.
      for (let step = 0; step < 10; step++) {
        started.admit()
        yield* TestClock.adjust("100 millis")
      }
      expect(silentExpired).toEqual(["handshake"])
      expect(startedExpired).toEqual([])
    }).pipe(Effect.provide(guardsLayer({ HANDSHAKE_TIMEOUT: "5s" })))
  )

  it.scoped("a carrier stream without a frame for CARRIER_IDLE_TIMEOUT expires; steady frames keep it alive", () =>
    Effect.gen(function* () {
      const guards = yield* SocketGuards
      const live = guards.gate("carrier")
      const quiet = guards.gate("carrier")
      live.authenticated = quiet.authenticated = () => true
      const liveExpired = watch(live)
      const quietExpired = watch(quiet)
      for (let ms = 0; ms < 9_000; ms += 100) {
        live.admit()
        quiet.admit()
        yield* TestClock.adjust("100 millis")
      }
      // From here the quiet stream sends nothing.
      for (let ms = 0; ms < 10_500; ms += 100) {
        expect(live.admit()).toBe(true)
        yield* TestClock.adjust("100 millis")
      }
      expect(quietExpired).toEqual(["idle"])
      expect(liveExpired).toEqual([])
    }).pipe(Effect.provide(guardsLayer({ CARRIER_IDLE_TIMEOUT: "10s" })))
  )

  it.scoped("with no socket open the ticker sleeps; a stream opened after a quiet hour still gets its whole handshake time", () =>
    Effect.gen(function* () {
      const guards = yield* SocketGuards
      /** A stream that never authenticates, opened after an hour with no socket: cut at 5 s, not before. */
      const quietHourThenSilentStream = Effect.gen(function* () {
        yield* TestClock.adjust("1 hour")
        const gate = guards.gate("carrier")
        gate.authenticated = () => false
        const expired = watch(gate)
        yield* TestClock.adjust("4900 millis")
        expect(expired).toEqual([])
        yield* TestClock.adjust("200 millis")
        expect(expired).toEqual(["handshake"])
        return gate
      })
      const first = yield* quietHourThenSilentStream
      // The ticker goes back to sleep with the last socket gone, and wakes for the next one.
      first.close()
      yield* quietHourThenSilentStream
    }).pipe(Effect.provide(guardsLayer({ HANDSHAKE_TIMEOUT: "5s" })))
  )

  plainIt("a stall of callgate's own event loop does not count against a stream's idle deadline (the gate, ticked by hand)", () => {
    const gate = new SocketGate({ rate: 200, burst: 1000, idleTimeoutMs: 10_000, handshakeTimeoutMs: 5_000 }, 0)
    gate.authenticated = () => true
    const expired = watch(gate)
    gate.admit()
    gate.tick(100, 100)
    // One tick 30 s late: the peer's frames sat unread in the kernel meanwhile.
    gate.tick(30_100, 30_000)
    expect(expired).toEqual([])
    // From here the silence is the peer's own.
    for (let now = 30_200; now <= 40_200; now += 100) gate.tick(now, 100)
    expect(expired).toEqual(["idle"])
  })

  plainIt("a stall of this process is not a flood: the backlog it queued is admitted, before or after the ticker's late tick", () => {
    const settings = { rate: 200, burst: 300 }
    for (const tickFirst of [false, true]) {
      let now = 0
      const gate = new SocketGate(settings, 0, undefined, () => now)
      const expired = watch(gate)
      // 20 s of real traffic: 50 frames a second, ticked every 100 ms.
      for (; now < 20_000; now += 100) {
        gate.tick(now, 100)
        for (let n = 0; n < 5; n++) expect(gate.admit()).toBe(true)
      }
      // A 30 s stall: 1500 frames queued in the kernel, read at once on resume.
      const stallStart = now - 100
      now = stallStart + 30_000
      if (tickFirst) gate.tick(now, 30_000)
      for (let n = 0; n < 1500; n++) expect(gate.admit()).toBe(true)
      expect(expired).toEqual([])
      // Traffic goes on at its own rate.
      for (let step = 0; step < 50; step++) {
        now += 100
        gate.tick(now, 100)
        for (let n = 0; n < 5; n++) expect(gate.admit()).toBe(true)
      }
      expect(expired).toEqual([])
    }
  })

  plainIt("a stall's credit is the sustained rate over the stall, and lapses: a peer that floods is still cut", () => {
    let now = 0
    const gate = new SocketGate({ rate: 200, burst: 300 }, 0, undefined, () => now)
    const expired = watch(gate)
    gate.tick(100, 100)
    // 7 s stall: at most 300 + 1400 messages pass, whatever the peer queued.
    now = 7_100
    let admitted = 0
    while (gate.admit()) admitted++
    expect(admitted).toBeGreaterThanOrEqual(1_400)
    expect(admitted).toBeLessThanOrEqual(1_700)
    expect(expired).toEqual(["rate"])

    // Unspent credit lapses after as long again: a flood later is cut at the burst.
    const later = new SocketGate({ rate: 200, burst: 300 }, 0, undefined, () => now)
    const laterExpired = watch(later)
    now = 7_000
    later.tick(now, 7_000)
    for (now = 7_100; now <= 15_000; now += 100) later.tick(now, 100)
    let flood = 0
    while (later.admit()) flood++
    expect(flood).toBeLessThanOrEqual(320)
    expect(laterExpired).toEqual(["rate"])
  })

  it.scoped("agent sockets have no idle or handshake limit (an idle dial-in socket is capacity)", () =>
    Effect.gen(function* () {
      const guards = yield* SocketGuards
      const agent = guards.gate("agent")
      const expired = watch(agent)
      yield* TestClock.adjust("1 minute")
      expect(expired).toEqual([])
    }).pipe(Effect.provide(guardsLayer()))
  )

  it.scoped("the message rate: a burst, then the sustained rate, forever; beyond it the gate expires once", () =>
    Effect.gen(function* () {
      const guards = yield* SocketGuards
      const gate = guards.gate("agent")
      const expired = watch(gate)
      for (let n = 0; n < 100; n++) expect(gate.admit()).toBe(true)
      // 10 seconds at exactly the sustained rate (200/s: 20 per 100 ms tick).
      for (let tick = 0; tick < 100; tick++) {
        yield* TestClock.adjust("100 millis")
        for (let n = 0; n < 20; n++) expect(gate.admit()).toBe(true)
      }
      expect(expired).toEqual([])
      // A flood: the bucket empties and the gate expires, once.
      let admitted = 0
      while (gate.admit()) admitted++
      expect(admitted).toBeLessThanOrEqual(100)
      expect(gate.admit()).toBe(false)
      expect(expired).toEqual(["rate"])
    }).pipe(Effect.provide(guardsLayer({ SOCKET_MESSAGE_RATE: "200", SOCKET_MESSAGE_BURST: "100" })))
  )

  it.scoped("a carrier that stops reading is cut beyond the backlog cap", () =>
    Effect.gen(function* () {
      const guards = yield* SocketGuards
      const gate = guards.gate("carrier")
      const expired = watch(gate)
      expect(gate.admitBacklog(1024 * 1024)).toBe(true)
      expect(gate.admitBacklog(4 * 1024 * 1024 + 1)).toBe(false)
      expect(expired).toEqual(["backlog"])
      const agent = guards.gate("agent")
      expect(agent.admitBacklog(64 * 1024 * 1024)).toBe(true)
    }).pipe(Effect.provide(guardsLayer()))
  )
})
