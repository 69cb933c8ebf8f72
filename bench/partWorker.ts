/**
 * Runs one of the self-contained benchmark parts in its own process (forked by run.ts), so each
 * gets the machine to itself: `run {part, options}` answers with the part's figures.
 */
import { serveWorker } from "./benchProcess.js"

serveWorker({
  run: async ({ part, options }: { part: string; options: any }) => {
    switch (part) {
      case "webhooks":
        return (await import("./webhooks.js")).runWebhookBench(options)
      case "breaker":
        return (await import("./breaker.js")).runBreakerBench(options)
      case "fallback":
        return (await import("./fallback.js")).runFallbackBench(options)
      case "shedding":
        return (await import("./shedding.js")).runSheddingBench(options)
      case "failover":
        return (await import("./failover.js")).runFailoverBench(options)
      default:
        throw new Error(`unknown bench part ${part}`)
    }
  }
})
