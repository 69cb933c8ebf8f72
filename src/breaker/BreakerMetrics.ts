import { Effect } from "effect"
import { counterOn, ENVIRONMENT_LABELS, gaugeOn, histogramOn, Metrics } from "../observability/Metrics.js"

/** Response latency buckets, seconds: a tenth of a second to half a minute. */
const LATENCY_BUCKETS = [0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 8, 13, 20, 30]

/**
 * Turn timing and breaker instruments, registered on the process registry so `/metrics` serves
 * them. All but one are per environment: labelled with the agent and environment ids (bounded by
 * configuration, not by traffic), and written through the methods below, which take those ids.
 */
export class BreakerMetrics extends Effect.Service<BreakerMetrics>()("callgate/BreakerMetrics", {
  effect: Effect.map(Metrics, ({ registry }) => {
    const responseLatency = histogramOn(registry, "callgate_agent_response_latency_seconds", "Time from the caller's last voiced frame (or DTMF digit) to the agent's first voiced frame, per answered turn", ENVIRONMENT_LABELS, LATENCY_BUCKETS)
    const playedLatency = histogramOn(registry, "callgate_agent_response_played_latency_seconds", "Time from the caller's last voiced frame (or DTMF digit) to the moment the caller heard the answer begin (the carrier echoed callgate's mark), per answered turn", ENVIRONMENT_LABELS, LATENCY_BUCKETS)
    const occurrences = counterOn(registry, "callgate_breaker_occurrences_total", "No-response timeout occurrences recorded (each expiry of a session's response timer)", ENVIRONMENT_LABELS)
    const trips = counterOn(registry, "callgate_breaker_trips_total", "Times an environment's occurrence count reached its threshold on this instance", ENVIRONMENT_LABELS)
    const state = gaugeOn(registry, "callgate_breaker_state", "The environment's breaker as this instance last saw it: 0 closed, 1 open, 2 probing (a probe call is with an agent)", ENVIRONMENT_LABELS)
    const shedCalls = counterOn(registry, "callgate_breaker_shed_calls_total", "New calls that got the error fallback in the entry answer because the environment's breaker was open", ENVIRONMENT_LABELS)
    const storeDegraded = gaugeOn(registry, "callgate_breaker_store_degraded", "1 while the breaker counts on this instance's local window because Redis is unreachable or slow")
    storeDegraded.set(0)

    const labels = (agentId: string, environmentId: string) => ({ agent: agentId, environment: environmentId })
    return {
      /** Called once per answered turn (not per frame). */
      observeResponseLatency: (agentId: string, environmentId: string, latencyMs: number) => responseLatency.observe(labels(agentId, environmentId), latencyMs / 1000),
      /** Called once per turn whose answer the carrier confirmed played. */
      observePlayedLatency: (agentId: string, environmentId: string, latencyMs: number) => playedLatency.observe(labels(agentId, environmentId), latencyMs / 1000),
      countOccurrence: (agentId: string, environmentId: string) => occurrences.inc(labels(agentId, environmentId)),
      countTrip: (agentId: string, environmentId: string) => trips.inc(labels(agentId, environmentId)),
      countShedCall: (agentId: string, environmentId: string) => shedCalls.inc(labels(agentId, environmentId)),
      /** 0 closed, 1 open, 2 probing. */
      setState: (agentId: string, environmentId: string, value: number) => state.set(labels(agentId, environmentId), value),
      storeDegraded
    } as const
  })
}) {}
