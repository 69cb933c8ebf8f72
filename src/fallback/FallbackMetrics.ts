import { Effect } from "effect"
import { Counter, Histogram } from "prom-client"
import { Metrics } from "../observability/Metrics.js"

/** Fallbacks by trigger, type and outcome, and how long the caller waited for the carrier request. */
export class FallbackMetrics extends Effect.Service<FallbackMetrics>()("callgate/FallbackMetrics", {
  effect: Effect.map(Metrics, ({ registry }) => {
    const fallbacks = new Counter({
      name: "callgate_fallbacks_total",
      help: "Error fallbacks run, by trigger (hard error kind), fallback type and outcome",
      labelNames: ["trigger", "type", "outcome"] as const,
      registers: [registry]
    })
    const carrierDelay = new Histogram({
      name: "callgate_fallback_carrier_request_delay_seconds",
      help: "Delay from a fallback trigger to the carrier REST request that acts on it",
      labelNames: ["trigger"] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry]
    })
    return {
      countFallback: (trigger: string, type: string, outcome: string) => fallbacks.inc({ trigger, type, outcome }),
      observeCarrierDelay: (trigger: string, seconds: number) => carrierDelay.observe({ trigger }, seconds)
    } as const
  })
}) {}
