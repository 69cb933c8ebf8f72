import { Effect, Layer, ManagedRuntime, TestContext } from "effect"
import { Metrics } from "../../src/observability/Metrics.js"
import { type CallRef, type CarrierError, Carriers, type CarriersShape } from "../../src/kernel/Carrier.js"
import { domainLayer } from "../support/testApp.js"

/**
 * The production graph's carrier REST (src/layers.ts `TelephonyLive` over the domain and the
 * foundation, in-memory stores) configured with `env`, logs silenced. `clock: "test"` runs it on the
 * Effect TestClock (`TestClock.sleeps` shows what it waits for, `TestClock.adjust` moves time), for
 * tests of what happens, or does not, while a wait lasts.
 */
export const makeCarrierRuntime = (env: Record<string, string>, options: { readonly clock?: "live" | "test" } = {}) =>
  ManagedRuntime.make(domainLayer("memory", env).pipe(Layer.provideMerge(options.clock === "test" ? TestContext.TestContext : Layer.empty)))
export type CarrierRuntime = ReturnType<typeof makeCarrierRuntime>

/** Runs one port operation; the result is an Either so tests can assert on the CarrierError. */
export const carrierOp = (
  runtime: CarrierRuntime,
  op: (carriers: CarriersShape) => Effect.Effect<void, CarrierError>
) => runtime.runPromise(Effect.either(Effect.flatMap(Carriers, op)))

export const metricsText = (runtime: CarrierRuntime) => runtime.runPromise(Effect.flatMap(Metrics, (m) => Effect.promise(() => m.registry.metrics())))

export type { CallRef }
