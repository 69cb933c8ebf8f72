import { Effect } from "effect"
import { Counter, Gauge, Histogram } from "prom-client"
import { Metrics } from "../observability/Metrics.js"

/**
 * Turn timing and breaker instruments, registered on the process registry so `/metrics` serves
 * them. Labels are agent and environment ids (bounded by configuration, not by traffic).
 */
export class BreakerMetrics extends Effect.Service<BreakerMetrics>()("callgate/BreakerMetrics", {
  effect: Effect.map(Metrics, ({ registry }) => {
    const responseLatency = new Histogram({
      name: "callgate_agent_response_latency_seconds",
      help: "Time from the caller's last voiced frame (or DTMF digit) to the agent's first voiced frame, per answered turn",
      labelNames: ["agent", "environment"] as const,
      buckets: [0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 8, 13, 20, 30],
      registers: [registry]
    })
    const playedLatency = new Histogram({
      name: "callgate_agent_response_played_latency_seconds",
      help: "Time from the caller's last voiced frame (or DTMF digit) to the moment the caller heard the answer begin (the carrier echoed callgate's mark), per answered turn",
      labelNames: ["agent", "environment"] as const,
      buckets: [0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 8, 13, 20, 30],
      registers: [registry]
    })
    const occurrences = new Counter({
      name: "callgate_breaker_occurrences_total",
      help: "No-response timeout occurrences recorded (each expiry of a session's response timer)",
      labelNames: ["agent", "environment"] as const,
      registers: [registry]
    })
    const trips = new Counter({
      name: "callgate_breaker_trips_total",
      help: "Times an environment's occurrence count reached its threshold on this instance",
      labelNames: ["agent", "environment"] as const,
      registers: [registry]
    })
    const storeDegraded = new Gauge({
      name: "callgate_breaker_store_degraded",
      help: "1 while the breaker counts on this instance's local window because Redis is unreachable or slow",
      registers: [registry]
    })
    storeDegraded.set(0)
    const state = new Gauge({
      name: "callgate_breaker_state",
      help: "The environment's breaker as this instance last saw it: 0 closed, 1 open, 2 probing (a probe call is with an agent)",
      labelNames: ["agent", "environment"] as const,
      registers: [registry]
    })
    const shedCalls = new Counter({
      name: "callgate_breaker_shed_calls_total",
      help: "New calls that got the error fallback in the entry answer because the environment's breaker was open",
      labelNames: ["agent", "environment"] as const,
      registers: [registry]
    })
    return {
      /** Called once per answered turn (not per frame). */
      observeResponseLatency: (agentId: string, environmentId: string, latencyMs: number) =>
        responseLatency.observe({ agent: agentId, environment: environmentId }, latencyMs / 1000),
      /** Called once per turn whose answer the carrier confirmed played. */
      observePlayedLatency: (agentId: string, environmentId: string, latencyMs: number) =>
        playedLatency.observe({ agent: agentId, environment: environmentId }, latencyMs / 1000),
      occurrences,
      trips,
      storeDegraded,
      state,
      shedCalls
    } as const
  })
}) {}
