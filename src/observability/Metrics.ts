import { Effect } from "effect"
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client"

/**
 * The instruments every concern registers, each in one line: name, help, label names (and a
 * histogram's buckets). Labels are bounded by configuration, never by traffic.
 */
export const counterOn = <L extends string = string>(registry: Registry, name: string, help: string, labelNames: ReadonlyArray<L> = []) =>
  new Counter<L>({ name, help, labelNames, registers: [registry] })

export const gaugeOn = <L extends string = string>(registry: Registry, name: string, help: string, labelNames: ReadonlyArray<L> = []) =>
  new Gauge<L>({ name, help, labelNames, registers: [registry] })

export const histogramOn = <L extends string = string>(registry: Registry, name: string, help: string, labelNames: ReadonlyArray<L>, buckets: Array<number>) =>
  new Histogram<L>({ name, help, labelNames, buckets, registers: [registry] })

/** A gauge whose value is read when /metrics is scraped. */
export const sampledGaugeOn = (registry: Registry, name: string, help: string, read: () => number) =>
  new Gauge({
    name,
    help,
    registers: [registry],
    collect() {
      this.set(read())
    }
  })

/** The labels of a per-environment instrument: the agent and environment ids. */
export const ENVIRONMENT_LABELS = ["agent", "environment"] as const

/**
 * The process's Prometheus registry. Each concern registers its own instruments on `registry`
 * (prom-client, the standard Node client) so `/metrics` serves them all. A fresh registry per
 * service instance keeps tests that build several apps in one process from colliding.
 */
export class Metrics extends Effect.Service<Metrics>()("callgate/Metrics", {
  sync: () => {
    const registry = new Registry()
    collectDefaultMetrics({ register: registry, prefix: "callgate_" })
    const httpRequests = counterOn(registry, "callgate_http_requests_total", "HTTP requests by method, route and status code", ["method", "route", "status"])
    const httpDuration = histogramOn(registry, "callgate_http_request_duration_seconds", "HTTP request duration by method, route and status code", ["method", "route", "status"], [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5])
    return { registry, httpRequests, httpDuration } as const
  }
}) {}
