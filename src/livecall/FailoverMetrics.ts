import { Effect } from "effect"
import { counterOn, histogramOn, Metrics } from "../observability/Metrics.js"

/** How agent failovers end (docs/observability.md, "Agent failover"): reattached to a new agent, or the error fallback. */
export type FailoverOutcome = "reattached" | "fallback"

/**
 * Agent failovers (docs/reliability.md, "Agent failover"): how many ended each way, and the time
 * from the old agent leg's end to the new agent's `start`.
 */
export class FailoverMetrics extends Effect.Service<FailoverMetrics>()("callgate/FailoverMetrics", {
  effect: Effect.map(Metrics, ({ registry }) => {
    const failovers = counterOn(registry, "callgate_agent_failovers_total", "Agent failovers of live calls, by outcome: reattached (a new agent took the call) or fallback (none in time: the error fallback ran)", ["outcome"])
    const gap = histogramOn(registry, "callgate_agent_failover_gap_seconds", "Time from the end of a call's agent leg to the new agent's start, for failovers that reattached", [], [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30])
    return {
      count: (outcome: FailoverOutcome) => failovers.inc({ outcome }),
      observeGap: (seconds: number) => gap.observe(seconds)
    } as const
  })
}) {}
