import { Effect } from "effect"
import { counterOn, histogramOn, Metrics } from "../observability/Metrics.js"

/** Fallbacks by trigger, type and outcome, and how long the caller waited for the carrier request. */
export class FallbackMetrics extends Effect.Service<FallbackMetrics>()("callgate/FallbackMetrics", {
  effect: Effect.map(Metrics, ({ registry }) => {
    const fallbacks = counterOn(registry, "callgate_fallbacks_total", "Error fallbacks run, by trigger (hard error kind), fallback type and outcome", ["trigger", "type", "outcome"])
    const carrierDelay = histogramOn(registry, "callgate_fallback_carrier_request_delay_seconds", "Delay from a fallback trigger to the carrier REST request that acts on it", ["trigger"], [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10])
    return {
      countFallback: (trigger: string, type: string, outcome: string) => fallbacks.inc({ trigger, type, outcome }),
      observeCarrierDelay: (trigger: string, seconds: number) => carrierDelay.observe({ trigger }, seconds)
    } as const
  })
}) {}
