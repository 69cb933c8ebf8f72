import { Effect, Option } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { PublicUrl } from "../config/PublicUrl.js"
import { LiveCalls } from "../livecall/LiveCalls.js"
import { OwnershipLease } from "../kernel/OwnershipLease.js"
import { goneAfterMs, RESERVATION_HOLD_MS } from "./FleetTiming.js"
import { InstanceRegistry } from "./InstanceRegistry.js"
import { type InstanceEntry, InstanceStore } from "./InstanceStore.js"

/** Which agent serves the placed call. */
export type PlacedAgent =
  /** The dial-in socket reserved for it. */
  | { readonly _tag: "Reserved"; readonly socketId: string }
  /** No dial-in agent of the environment is idle anywhere in the fleet: rescued at once. */
  | { readonly _tag: "NoneIdle" }
  /** Whatever the instance finds when the stream starts (dial-out, or the store did not answer). */
  | { readonly _tag: "Any" }

/** Where a call's media stream goes. */
export type Placed =
  | {
      readonly _tag: "Placed"
      readonly instanceId: string
      /** The chosen instance's PUBLIC_URL: its stream URL is built from it. */
      readonly publicUrl: string
      readonly agent: PlacedAgent
    }
  /** This instance takes no new calls (it drains, or its hold is nearly out) and no other live instance can take the call. */
  | { readonly _tag: "NoInstance" }

/**
 * Placement at the call entry (docs/scaling.md, "Placement"). A dial-in environment: one idle
 * agent socket is reserved atomically in the store, on this instance when it has one, otherwise
 * on the instance with the most idle ones; the stream goes to that instance and binds to that
 * socket; the hold lapses after RESERVATION_HOLD_MS. No idle agent anywhere: the stream comes here
 * and the caller is rescued at once (`no_idle_agent`). A dial-out environment (agentUrl): this
 * instance unless it drains, else the least-loaded live one that does not. A store that does not
 * answer places the call here, unreserved, as a single instance would.
 *
 * An instance whose registration the store has not taken for nearly INSTANCE_TTL
 * (`OwnershipLease.takesCalls`: the fleet may soon count it gone and claim its calls) places as a
 * draining one does: elsewhere, never on itself; with no other live instance, or no store to ask,
 * NoInstance (the entry answers 503 and the carrier tries the number's fallback URL).
 */
export class Placement extends Effect.Service<Placement>()("callgate/Placement", {
  effect: Effect.gen(function* () {
    const publicUrl = yield* PublicUrl
    const ttlMs = goneAfterMs(yield* AppConfig)
    const store = yield* InstanceStore
    const registry = yield* InstanceRegistry
    const sessions = yield* LiveCalls
    const lease = yield* OwnershipLease
    const self = registry.instanceId
    let refusing = false

    /** Whether this instance's hold on its calls is nearly out: said once when it starts and once when it ends. */
    const holdShort = Effect.suspend(() => {
      const short = !lease.takesCalls()
      if (short === refusing) return Effect.succeed(short)
      refusing = short
      return Effect.as(
        short
          ? Effect.logWarning("this instance's registration has not been refreshed for nearly INSTANCE_TTL: new calls go to other instances", {
              msLeft: Math.round(lease.remainingMs())
            })
          : Effect.logInfo("this instance's registration is refreshed again: it takes new calls"),
        short
      )
    })

    const here = (agent: PlacedAgent): Placed => ({ _tag: "Placed", instanceId: self, publicUrl: publicUrl.current(), agent })
    const on = (entry: InstanceEntry, agent: PlacedAgent): Placed => ({ _tag: "Placed", instanceId: entry.id, publicUrl: entry.publicUrl, agent })

    const otherInstances = Effect.map(registry.instances, (live) => live.filter((entry) => entry.id !== self && !entry.draining))
    /** The other live instances, as the registry last listed them when the store does not answer now. */
    const otherInstancesOrKnown = otherInstances.pipe(
      Effect.orElse(() => Effect.sync(() => registry.knownInstances().filter((entry) => entry.id !== self && !entry.draining)))
    )

    const leastLoaded = (live: ReadonlyArray<InstanceEntry>): Option.Option<InstanceEntry> =>
      Option.fromNullable(
        [...live].sort((a, b) => a.liveCalls - b.liveCalls || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))[0]
      )

    const urlOf = (instanceId: string) =>
      instanceId === self
        ? Effect.succeed(Option.some(publicUrl.current()))
        : Option.match(registry.known(instanceId), {
            onSome: (entry) => Effect.succeed(Option.some(entry.publicUrl)),
            onNone: () => Effect.map(registry.instances, (live) => Option.map(Option.fromNullable(live.find((e) => e.id === instanceId)), (e) => e.publicUrl))
          })

    const dialIn = (agentId: string, environmentId: string, short: boolean): Effect.Effect<Placed> =>
      Effect.gen(function* () {
        yield* registry.flush(agentId, environmentId)
        const leaving = short || sessions.isDraining()
        // An instance that takes no new calls prefers no one and is never chosen (a draining one's
        // agents were sent elsewhere; one whose hold is nearly out may soon count as gone).
        const reserved = yield* store.reserve(agentId, environmentId, leaving ? "" : self, RESERVATION_HOLD_MS, ttlMs, leaving ? self : "")
        if (Option.isNone(reserved)) {
          if (!leaving) return here({ _tag: "NoneIdle" })
          return Option.match(leastLoaded(yield* otherInstances), {
            onNone: (): Placed => ({ _tag: "NoInstance" }),
            onSome: (entry) => on(entry, { _tag: "NoneIdle" })
          })
        }
        const { instanceId, socketId } = reserved.value
        const url = yield* urlOf(instanceId)
        // Reserved on an instance that left the registry since: its stream would find no one.
        if (Option.isNone(url)) return leaving && short ? ({ _tag: "NoInstance" } as Placed) : here({ _tag: "Any" })
        return { _tag: "Placed", instanceId, publicUrl: url.value, agent: { _tag: "Reserved", socketId } } as Placed
      }).pipe(
        Effect.catchAll((error) =>
          short
            ? Effect.as(
                Effect.logWarning("call refused: this instance's hold is nearly out and the store does not answer to place it elsewhere", { error: error.message }),
                { _tag: "NoInstance" } as Placed
              )
            : Effect.as(
                Effect.logWarning("placement could not reach the store: the call stays on this instance", { error: error.message }),
                here({ _tag: "Any" })
              )
        )
      )

    const dialOut = (short: boolean): Effect.Effect<Placed> => Effect.suspend(() => {
      if (!short && !sessions.isDraining()) return Effect.succeed(here({ _tag: "Any" }))
      return (short ? otherInstancesOrKnown : otherInstances).pipe(
        Effect.map((live) =>
          Option.match(leastLoaded(live), {
            onNone: (): Placed => ({ _tag: "NoInstance" }),
            onSome: (entry) => on(entry, { _tag: "Any" })
          })
        ),
        Effect.catchAll(() => Effect.succeed<Placed>({ _tag: "NoInstance" }))
      )
    })

    return {
      /** This instance, the agent found when the stream starts (a call that must stay here). */
      get here(): Placed {
        return here({ _tag: "Any" })
      },
      /** Chooses the instance (and the agent) for a call of the environment. */
      place: (agentId: string, environmentId: string, agentUrl: string | null): Effect.Effect<Placed> =>
        Effect.flatMap(holdShort, (short) => (agentUrl === null ? dialIn(agentId, environmentId, short) : dialOut(short)))
    } as const
  })
}) {}
