import { Clock, Duration, Effect, Option, Queue } from "effect"
import { OwnershipLease } from "../kernel/OwnershipLease.js"
import { SessionFencing } from "../kernel/SessionFencing.js"
import { SessionEnding } from "../livecall/LiveCall.js"
import { environmentKey } from "../kernel/EnvironmentKey.js"
import { logStoreFailure } from "../kernel/StoreError.js"
import { AgentPool } from "../agent/AgentPool.js"
import { AppConfig } from "../config/AppConfig.js"
import { InstanceIdentity } from "../config/InstanceIdentity.js"
import { PublicUrl } from "../config/PublicUrl.js"
import { LiveCalls } from "../livecall/LiveCalls.js"
import { goneAfterMs, REFRESH_INTERVAL } from "./FleetTiming.js"
import { type InstanceEntry, type InstanceReport, InstanceStore } from "./InstanceStore.js"
import { nowIso } from "../kernel/Time.js"
import { repeatSpaced } from "../kernel/Tickers.js"


interface EnvironmentRef {
  readonly agentId: string
  readonly environmentId: string
}

/**
 * This instance in the fleet's registry (docs/scaling.md, "The instance registry"): its id,
 * PUBLIC_URL, whether it drains, its live calls and its idle dial-in agents per environment,
 * refreshed every REFRESH_INTERVAL. A change of an environment's idle agents is published at once
 * (and before any placement, see `flush`), so placement never reserves a socket already taken.
 * On shutdown the instance withdraws its entry and its agents.
 */
export class InstanceRegistry extends Effect.Service<InstanceRegistry>()("callgate/InstanceRegistry", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const publicUrl = yield* PublicUrl
    const identity = yield* InstanceIdentity
    const store = yield* InstanceStore
    const pool = yield* AgentPool
    const sessions = yield* LiveCalls
    const fencing = yield* SessionFencing
    const lease = yield* OwnershipLease
    const startedAt = yield* nowIso
    const self = identity.instanceId
    const ttlMs = goneAfterMs(config)

    /** Environments whose idle agents changed since they were last published. */
    const dirty = new Map<string, EnvironmentRef>()
    /** Environments this instance has idle agents published in (an empty list withdraws them). */
    const published = new Map<string, EnvironmentRef>()
    /** Environments whose publish is being written now (taken out of `dirty`, not yet in the store). */
    const publishing = new Set<string>()
    const lock = yield* Effect.makeSemaphore(1)
    const wake = yield* Queue.sliding<void>(1)
    let known: ReadonlyArray<InstanceEntry> = []

    const report = (): InstanceReport => ({
      id: self,
      publicUrl: publicUrl.current(),
      draining: sessions.isDraining(),
      liveCalls: sessions.liveCount(),
      startedAt,
      idleAgents: pool.idleSockets().map(({ agentId, environmentId, sockets }) => ({ agentId, environmentId, idle: sockets.length }))
    })

    const publishOne = (ref: EnvironmentRef) => {
      const key = environmentKey(ref.agentId, ref.environmentId)
      dirty.delete(key)
      publishing.add(key)
      const sockets = pool.idleSocketsOf(ref.agentId, ref.environmentId)
      return store.publishIdle(self, { ...ref, sockets }).pipe(
        Effect.tap(() => Effect.sync(() => (sockets.length > 0 ? published.set(key, ref) : published.delete(key)))),
        Effect.tapError(() => Effect.sync(() => dirty.set(key, ref))),
        Effect.ensuring(Effect.sync(() => publishing.delete(key)))
      )
    }

    /** Publishes the environments whose idle agents changed; with `all`, every one (the refresh). */
    const publish = (all: boolean) =>
      lock.withPermits(1)(
        Effect.gen(function* () {
          const refs = new Map(dirty)
          if (all) {
            for (const [key, ref] of published) refs.set(key, ref)
            for (const { agentId, environmentId } of pool.idleSockets()) refs.set(environmentKey(agentId, environmentId), { agentId, environmentId })
          }
          for (const ref of refs.values()) yield* publishOne(ref)
        })
      )

    /**
     * Sessions another instance claimed from this one (it had paused, or lost the store, past
     * INSTANCE_TTL): they stop here at once, legs closed, no rescue and no ending of this
     * instance's own (docs/reliability.md, "Fencing"); one line says how many.
     */
    const letGoOfTaken = Effect.gen(function* () {
      const taken = yield* fencing.takenFrom(self)
      let stopped = 0
      for (const ref of taken) {
        const live = sessions.live(ref.sessionId)
        if (Option.isSome(live) && live.value.end(SessionEnding.TakenOver())) stopped++
      }
      if (taken.length > 0) {
        yield* Effect.logWarning(
          `${stopped} live calls were claimed by another instance while this one could not refresh its registration: stopped serving them`,
          { claimed: taken.length, stopped }
        )
      }
    })

    const refreshFailed = (error: { readonly message: string }) =>
      logStoreFailure("could not refresh this instance in the fleet registry", error, { error: error.message })

    /**
     * The entry, on a loop of its own: the hold is renewed as soon as the store took it, timed from
     * just before the write the fleet times this instance by. Publishing idle agents (which waits
     * for the publishes of agents connecting) and listing the fleet run on the other loop, so
     * however slow they are on a distant store, they never delay it.
     */
    const heartbeat = Effect.gen(function* () {
      const at = yield* Clock.currentTimeMillis
      yield* store.report(report(), ttlMs)
      lease.renewed(at)
    }).pipe(Effect.catchAll(refreshFailed))

    const resync = Effect.gen(function* () {
      yield* publish(true)
      known = yield* store.list(ttlMs)
      lease.sawOthers(known.some((entry) => entry.id !== self))
      yield* letGoOfTaken
    }).pipe(Effect.catchAll(refreshFailed))

    const refresh = Effect.zipRight(heartbeat, resync)

    const stopListening = pool.onChange((agentId, environmentId) => {
      dirty.set(environmentKey(agentId, environmentId), { agentId, environmentId })
      Queue.unsafeOffer(wake, undefined)
    })
    yield* Effect.addFinalizer(() => Effect.sync(stopListening))

    // A restart under the same INSTANCE_ID: the previous run's idle sockets are still listed under
    // this id (it was killed, it withdrew nothing). Its last report names their environments: this
    // run's first refresh publishes those with the sockets it has (none yet), withdrawing them.
    const previous = yield* store.list(ttlMs).pipe(Effect.orElseSucceed((): ReadonlyArray<InstanceEntry> => []))
    for (const { agentId, environmentId } of previous.find((entry) => entry.id === self)?.idleAgents ?? []) {
      dirty.set(environmentKey(agentId, environmentId), { agentId, environmentId })
    }
    yield* refresh
    yield* Option.isSome(config.redisUrl)
      ? Effect.logInfo("joined the fleet registry", { instanceId: self, publicUrl: publicUrl.current() })
      : Effect.logWarning("the embedded in-memory store serves this one instance only: set REDIS_URL to run a fleet", { instanceId: self })
    yield* Effect.forkScoped(repeatSpaced(heartbeat, REFRESH_INTERVAL))
    yield* Effect.forkScoped(repeatSpaced(resync, REFRESH_INTERVAL))
    yield* Queue.take(wake).pipe(
      Effect.zipRight(publish(false)),
      Effect.catchAll((error) => Effect.logWarning("could not publish this instance's idle agents", { error: error.message })),
      Effect.forever,
      Effect.forkScoped
    )
    yield* Effect.addFinalizer(() =>
      store.withdraw(self, [...published.values(), ...pool.idleSockets()]).pipe(
        Effect.timeout(Duration.seconds(2)),
        Effect.catchAll(() => Effect.logWarning("could not withdraw this instance from the fleet registry")),
        Effect.zipRight(Effect.logInfo("left the fleet registry", { instanceId: self }))
      )
    )

    /** The live instances, read from the store now. */
    const instances = store.list(ttlMs).pipe(Effect.tap((live) => Effect.sync(() => (known = live))))

    return {
      instanceId: self,
      instances,
      /**
       * Publishes the environment's idle agents now if they changed since last published; when a
       * publish of them is being written, waits until it is in the store.
       */
      flush: (agentId: string, environmentId: string) => {
        const key = environmentKey(agentId, environmentId)
        return dirty.has(key) || publishing.has(key) ? publish(false) : Effect.void
      },
      /** The live instances as last read from the registry (no store round trip). */
      knownInstances: (): ReadonlyArray<InstanceEntry> => known,
      /** The instance as last read from the registry (None when not seen in the last refresh). */
      known: (instanceId: string): Option.Option<InstanceEntry> => Option.fromNullable(known.find((entry) => entry.id === instanceId)),
      /** This instance's report as it stands now. */
      selfReport: report
    } as const
  })
}) {}
