import { Effect, Layer } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { InstanceIdentity } from "../config/InstanceIdentity.js"
import { logStoreFailure } from "../kernel/StoreError.js"
import { OrphanReconciler } from "../recovery/OrphanReconciler.js"
import { goneAfterMs, REFRESH_INTERVAL } from "./FleetTiming.js"
import { InstanceStore } from "./InstanceStore.js"
import { repeatSpaced } from "../kernel/Tickers.js"

/**
 * The fleet rescues a dead instance's calls (docs/reliability.md, "Instance loss"): every instance,
 * on each registry refresh, asks which instances stopped refreshing for INSTANCE_TTL without withdrawing (they died:
 * an orderly shutdown withdraws) and reconciles each one's sessions. Claims are one compare-and-set
 * per session, so however many survivors race, each orphan is rescued through the carrier's REST
 * API and ended `failed` / `instance_lost` exactly once. An instance reconciled here is tried again
 * only if it comes back and goes silent once more; a reconciliation the store refused is retried at
 * the next refresh.
 */
export const LostInstancesLive = Layer.scopedDiscard(
  Effect.gen(function* () {
    const store = yield* InstanceStore
    const reconciler = yield* OrphanReconciler
    const { instanceId: self } = yield* InstanceIdentity
    const reconciled = new Set<string>()
    const ttlMs = goneAfterMs(yield* AppConfig)

    const sweep = Effect.gen(function* () {
      const silent = new Set(yield* store.silent(ttlMs))
      // One that is no longer silent came back (or was pruned): if it dies again, it is rescued again.
      for (const id of reconciled) if (!silent.has(id)) reconciled.delete(id)
      for (const id of silent) {
        if (id === self || reconciled.has(id)) continue
        const report = yield* reconciler.reconcileOrphans(id)
        reconciled.add(id)
        if (report.rescued + report.finished > 0) {
          yield* Effect.logWarning("rescued the calls of an instance that stopped refreshing", { lostInstance: id, ...report })
        }
      }
    }).pipe(Effect.catchAll((error) => logStoreFailure("could not reconcile the fleet's lost instances; retrying", error, { error: error.message })))

    yield* Effect.forkScoped(repeatSpaced(sweep, REFRESH_INTERVAL))
  })
)
