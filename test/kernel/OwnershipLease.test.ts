import { it } from "@effect/vitest"
import { Effect, Layer, TestClock } from "effect"
import { describe, expect } from "vitest"
import { AppConfig } from "../../src/config/AppConfig.js"
import { OwnershipLease } from "../../src/kernel/OwnershipLease.js"
import { testConfigLayer, TEST_SECRETS_KEY } from "../support/testApp.js"

/**
 * The hold an instance has on its calls (docs/reliability.md, "Fencing"), on the TestClock: it
 * lasts INSTANCE_TTL from the moment the last registry write the store took was sent, and new
 * calls stop `min(TTL / 2, 3 s)` before it runs out, not after. No store round trip is involved:
 * the registry (InstanceRegistry) calls `renewed` with the time it read before its write.
 */

const leaseOn = (env: Record<string, string>) =>
  OwnershipLease.Default.pipe(Layer.provide(AppConfig.Default), Layer.provide(testConfigLayer(env)))

const onRedis = (ttl: string) => leaseOn({ REDIS_URL: "redis://127.0.0.1:1", SECRETS_KEY: TEST_SECRETS_KEY, INSTANCE_TTL: ttl })

describe("OwnershipLease on the TestClock", () => {
  it.effect("INSTANCE_TTL 10 s: takes calls until 7 s after the write it was renewed by, not at 7 s; the fleet may count it gone at 10 s", () =>
    Effect.gen(function* () {
      const lease = yield* OwnershipLease
      yield* TestClock.adjust("1 second")
      lease.renewed(1_000)
      yield* TestClock.adjust("6999 millis")
      expect(lease.takesCalls()).toBe(true)
      expect(lease.remainingMs()).toBe(3_001)
      yield* TestClock.adjust("1 millis")
      expect(lease.takesCalls()).toBe(false)
      expect(lease.remainingMs()).toBe(3_000)
      // Still its own calls' owner until the fleet may claim them.
      expect(lease.mayActAlone()).toBe(true)
      yield* TestClock.adjust("3 seconds")
      expect(lease.remainingMs()).toBe(0)
      lease.sawOthers(true)
      expect(lease.mayActAlone()).toBe(false)
      // With no other live instance at its last refresh, no one else would rescue them.
      lease.sawOthers(false)
      expect(lease.mayActAlone()).toBe(true)
      // The next write the store takes renews it: calls again.
      lease.renewed(11_000)
      expect(lease.takesCalls()).toBe(true)
    }).pipe(Effect.provide(onRedis("10s")))
  )

  it.effect("a refresh whose write took long still renews from when it was sent; an older write never shortens the hold", () =>
    Effect.gen(function* () {
      const lease = yield* OwnershipLease
      // A store 300 ms away each way: the write was sent at 2 s, its reply came at 2.6 s.
      yield* TestClock.adjust("2600 millis")
      lease.renewed(2_000)
      expect(lease.remainingMs()).toBe(9_400)
      // A late answer to an earlier write (sent at 0) does not move the hold back.
      lease.renewed(0)
      expect(lease.remainingMs()).toBe(9_400)
      // Refreshes every 2 s plus round trips keep it well clear of the margin.
      for (let sent = 4_600; sent <= 40_000; sent += 2_600) {
        yield* TestClock.adjust("2600 millis")
        expect(lease.takesCalls()).toBe(true)
        lease.renewed(sent)
      }
    }).pipe(Effect.provide(onRedis("10s")))
  )

  it.effect("INSTANCE_TTL 5 s: the margin is half of it (2.5 s)", () =>
    Effect.gen(function* () {
      const lease = yield* OwnershipLease
      yield* TestClock.adjust("2499 millis")
      expect(lease.takesCalls()).toBe(true)
      yield* TestClock.adjust("1 millis")
      expect(lease.takesCalls()).toBe(false)
    }).pipe(Effect.provide(onRedis("5s")))
  )

  it.effect("the embedded store: no fleet, the hold never runs out", () =>
    Effect.gen(function* () {
      const lease = yield* OwnershipLease
      yield* TestClock.adjust("1 hour")
      expect(lease.takesCalls()).toBe(true)
      expect(lease.remainingMs()).toBe(Infinity)
    }).pipe(Effect.provide(leaseOn({})))
  )
})
