import { it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { describe, expect } from "vitest"
import { AuthThrottle } from "../../src/apikeys/AuthThrottle.js"
import { domainLayer } from "../support/testApp.js"

describe("AuthThrottle on the Clock", () => {
  it.scoped("an address past AUTH_FAILURES_PER_MINUTE waits out its minute, counted by the TestClock", () =>
    Effect.gen(function* () {
      const throttle = yield* AuthThrottle
      expect(throttle.refused("192.0.2.7")).toBeUndefined()
      expect(throttle.refused("192.0.2.7")).toBeUndefined()
      expect(throttle.refused("192.0.2.7")).toBe(60)
      // Another address is not touched by this one's failures.
      expect(throttle.refused("192.0.2.8")).toBeUndefined()
      yield* TestClock.adjust("45 seconds")
      expect(throttle.refused("192.0.2.7")).toBe(15)
      yield* TestClock.adjust("15 seconds")
      // The minute is over: a new window, within the limit again.
      expect(throttle.refused("192.0.2.7")).toBeUndefined()
    }).pipe(Effect.provide(domainLayer("memory", { AUTH_FAILURES_PER_MINUTE: "2" })))
  )
})
