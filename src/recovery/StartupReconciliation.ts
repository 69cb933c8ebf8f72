import { Effect, Layer, Option } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { InstanceIdentity } from "../config/InstanceIdentity.js"
import { isStoreUnreachable, untilTheStoreAnswers } from "../kernel/StoreError.js"
import { OrphanReconciler } from "./OrphanReconciler.js"
import { SessionEndJournal, storeAddress } from "../sessions/SessionEndJournal.js"

/**
 * At start (docs/reliability.md, "Crash and restart"): on Redis, once the spool of the previous
 * run is replayed, this instance reconciles the sessions its previous run left (same instance id,
 * created before this run began), retrying until the store answers. On the embedded in-memory
 * store there is nothing to reconcile: it says at start what it does not promise.
 */
export const StartupReconciliationLive = Layer.scopedDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const { instanceId, startedAt } = yield* InstanceIdentity
    const journal = yield* SessionEndJournal
    const reconciler = yield* OrphanReconciler
    if (Option.isNone(config.redisUrl)) {
      yield* Effect.logWarning(
        "embedded in-memory store (REDIS_URL is not set): for development and single-box trials only. Sessions, environments, " +
          "API keys and queued webhooks live in this process: a crash or restart loses them, live calls are not rescued after a " +
          "crash and their session.ended is never sent. Set REDIS_URL to keep them."
      )
      return
    }
    yield* Effect.logInfo("instance", { instanceId, store: storeAddress(config), dataDir: config.dataDir })
    let warned = false
    yield* Effect.gen(function* () {
      yield* journal.replayed
      const report = yield* reconciler.reconcileOrphans(instanceId, { createdBefore: startedAt }).pipe(
        Effect.tapError((error) =>
          Effect.suspend(() => {
            // One line for a failure the store connection did not already report; then quiet retries.
            if (warned || isStoreUnreachable(error)) return Effect.void
            warned = true
            return Effect.logWarning("reconciling the previous run's sessions: the store did not answer; retrying", { error: error.message })
          })
        ),
        Effect.retry(untilTheStoreAnswers)
      )
      if (report.rescued + report.finished > 0) yield* Effect.logWarning("the previous run's sessions are reconciled", { ...report })
    }).pipe(
      Effect.catchAllCause((cause) => Effect.logError("reconciling the previous run's sessions failed", cause)),
      Effect.forkScoped
    )
  })
)
