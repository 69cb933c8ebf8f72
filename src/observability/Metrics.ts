import { Effect } from "effect"
import { collectDefaultMetrics, Counter, Histogram, Registry } from "prom-client"

/**
 * The process's Prometheus registry. Each concern registers its own instruments on `registry`
 * (prom-client, the standard Node client) so `/metrics` serves them all. A fresh registry per
 * service instance keeps tests that build several apps in one process from colliding.
 */
export class Metrics extends Effect.Service<Metrics>()("callgate/Metrics", {
  sync: () => {
    const registry = new Registry()
    collectDefaultMetrics({ register: registry, prefix: "callgate_" })
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
