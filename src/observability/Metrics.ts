import { Effect } from "effect"
import { collectDefaultMetrics, Counter, Histogram, Registry } from "prom-client"

/**
 * How often the event-loop delay monitor behind `callgate_nodejs_eventloop_lag_*` samples, ms.
 * prom-client's default (10) wakes an idle process 200 times a second: 10 ms of CPU per second
 * of an idle instance, measured, two thirds of all it spends idle. At 50 ms a stall of any
 * length still shows in the histogram (each late sample records how late it was), at a fifth
 * of the wake-ups.
 */
export const EVENT_LOOP_SAMPLE_MS = 50

/**
 * The process's Prometheus registry. Each concern registers its own instruments on `registry`
 * (prom-client, the standard Node client) so `/metrics` serves them all. A fresh registry per
 * service instance keeps tests that build several apps in one process from colliding.
 */
export class Metrics extends Effect.Service<Metrics>()("callgate/Metrics", {
  sync: () => {
    const registry = new Registry()
    collectDefaultMetrics({ register: registry, prefix: "callgate_", eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS })
    const httpRequests = new Counter({
      name: "callgate_http_requests_total",
      help: "HTTP requests by method, route and status code",
      labelNames: ["method", "route", "status"] as const,
      registers: [registry]
    })
    const httpDuration = new Histogram({
      name: "callgate_http_request_duration_seconds",
      help: "HTTP request duration by method, route and status code",
      labelNames: ["method", "route", "status"] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry]
    })
    return { registry, httpRequests, httpDuration } as const
  }
}) {}
