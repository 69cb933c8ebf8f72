import { Effect, Option, Runtime } from "effect"
import { Gauge } from "prom-client"
import { counterOn, histogramOn, Metrics } from "../observability/Metrics.js"
import { type OutboxStats, OutboxStore } from "./OutboxStore.js"

/** How a delivery settled. */
export type DeliveryOutcome = "delivered" | "failed" | "exhausted" | "cancelled"

/** What one attempt got back. */
export type AttemptResult = "success" | "client_error" | "server_error" | "timeout" | "connection_error" | "refused"

/**
 * The outbox's instruments on the process registry: settled deliveries by outcome, attempt
 * durations by result, and the outbox depth and oldest pending age, read from the store when
 * Prometheus scrapes (one store read serves both gauges).
 */
export class DeliveryMetrics extends Effect.Service<DeliveryMetrics>()("callgate/DeliveryMetrics", {
  effect: Effect.gen(function* () {
    const clock = yield* Effect.clock
    const { registry } = yield* Metrics
    const store = yield* OutboxStore
    const runStats = Runtime.runPromise(yield* Effect.runtime<never>())

    const deliveries = counterOn(registry, "callgate_webhook_deliveries_total", "Event webhook deliveries settled, by outcome (delivered, failed, exhausted, cancelled)", ["outcome"])
    const attemptDuration = histogramOn(registry, "callgate_webhook_attempt_duration_seconds", "Duration of event webhook attempts, by result", ["result"], [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10])

    let scrape: { at: number; stats: Promise<OutboxStats | undefined> } | undefined
    const stats = () => {
      const now = clock.unsafeCurrentTimeMillis()
      if (scrape === undefined || now - scrape.at > 250) {
        scrape = { at: now, stats: runStats(store.stats).catch(() => undefined) }
      }
      return scrape.stats
    }
    new Gauge({
      name: "callgate_webhook_outbox_depth",
      help: "Event webhook deliveries pending (waiting for their next attempt or in flight)",
      registers: [registry],
      async collect() {
        const current = await stats()
        if (current !== undefined) this.set(current.depth)
      }
    })
    new Gauge({
      name: "callgate_webhook_outbox_oldest_pending_age_seconds",
      help: "Age of the longest-pending event webhook delivery; 0 when none is pending",
      registers: [registry],
      async collect() {
        const current = await stats()
        if (current === undefined) return
        this.set(Option.match(current.oldestPendingSince, { onNone: () => 0, onSome: (since) => Math.max(0, clock.unsafeCurrentTimeMillis() - since) / 1000 }))
      }
    })

    return {
      settled: (outcome: DeliveryOutcome, count = 1) => {
        if (count > 0) deliveries.inc({ outcome }, count)
      },
      attempted: (result: AttemptResult, seconds: number) => attemptDuration.observe({ result }, seconds)
    } as const
  })
}) {}
