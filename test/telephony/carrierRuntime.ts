import { Effect, Layer, Logger, ManagedRuntime, TestContext } from "effect"
import { AppConfig } from "../../src/config/AppConfig.js"
import { Metrics } from "../../src/observability/Metrics.js"
import { type CallRef, type CarrierError, Carriers, type CarriersShape } from "../../src/kernel/Carrier.js"
import { CarriersLive } from "../../src/carriers/CarriersLive.js"
import { TelnyxCallCommands } from "../../src/carriers/TelnyxCallCommands.js"
import { TelnyxCarrier } from "../../src/carriers/TelnyxCarrier.js"
import { TelnyxRest } from "../../src/carriers/TelnyxRest.js"
import { TelnyxTwimlRunner } from "../../src/carriers/TelnyxTwimlRunner.js"
import { TwilioCarrier } from "../../src/carriers/TwilioCarrier.js"
import { testConfigLayer } from "../support/testApp.js"

/**
 * The carrier adapters and the `Carriers` port over them, configured with `env`, logs silenced.
 * `clock: "test"` runs them on the Effect TestClock (`TestClock.sleeps` shows what they wait for,
 * `TestClock.adjust` moves time), for tests of what happens, or does not, while a wait lasts.
 */
export const makeCarrierRuntime = (env: Record<string, string>, options: { readonly clock?: "live" | "test" } = {}) =>
  ManagedRuntime.make(
    CarriersLive.pipe(
      Layer.provideMerge(Layer.mergeAll(TwilioCarrier.Default, TelnyxCarrier.Default)),
      Layer.provideMerge(Layer.mergeAll(TelnyxCallCommands.Default, TelnyxTwimlRunner.Default)),
      Layer.provideMerge(TelnyxRest.Default),
      Layer.provideMerge(Metrics.Default),
      Layer.provideMerge(AppConfig.Default),
      Layer.provide(Logger.remove(Logger.defaultLogger)),
      Layer.provide(testConfigLayer(env)),
      Layer.provideMerge(options.clock === "test" ? TestContext.TestContext : Layer.empty)
    )
  )
export type CarrierRuntime = ReturnType<typeof makeCarrierRuntime>

/** Runs one port operation; the result is an Either so tests can assert on the CarrierError. */
export const carrierOp = (
  runtime: CarrierRuntime,
  op: (carriers: CarriersShape) => Effect.Effect<void, CarrierError>
) => runtime.runPromise(Effect.either(Effect.flatMap(Carriers, op)))

export const metricsText = (runtime: CarrierRuntime) => runtime.runPromise(Effect.flatMap(Metrics, (m) => Effect.promise(() => m.registry.metrics())))

export type { CallRef }
