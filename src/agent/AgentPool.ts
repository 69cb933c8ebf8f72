import { Duration, Effect, Option } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { InstanceIdentity } from "../config/InstanceIdentity.js"
import { Metrics, sampledGaugeOn } from "../observability/Metrics.js"
import { CloseCode } from "../frames/WireSocket.js"
import type { AgentConnection } from "./AgentConnection.js"
import { environmentKey } from "../kernel/EnvironmentKey.js"
import { repeatSpaced } from "../kernel/Tickers.js"


/** One environment's idle sockets, by id, oldest first. */
export interface IdleSockets {
  readonly agentId: string
  readonly environmentId: string
  readonly sockets: ReadonlyArray<string>
}

interface PoolEntry {
  readonly agentId: string
  readonly environmentId: string
  /** socket id -> connection, in arrival order */
  readonly sockets: Map<string, AgentConnection>
}

/**
 * Dial-in capacity: the idle agent sockets of each environment, oldest first, each with an id
 * unique in the fleet and across restarts (`{INSTANCE_ID}.{run}.{n}`, run: when this process
 * started, base 36) that placement reserves (docs/scaling.md). A socket is announced (listed with
 * the idle ones) before its upgrade is answered, so the fleet can place a call on it by the time
 * the agent sees it open. Each one
 * serves one call: `take` hands it out (the reserved one when it is still idle) and forgets it;
 * listeners hear every change of an environment's idle sockets. Every agent socket callgate holds (idle, in a call,
 * or dialled out) is pinged every AGENT_PING_INTERVAL; one that missed the previous pong is cut,
 * which removes it from the pool (idle) or fails its call (bound).
 */
export class AgentPool extends Effect.Service<AgentPool>()("callgate/AgentPool", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const { instanceId, startedAt } = yield* InstanceIdentity
    const metrics = yield* Metrics
    const idle = new Map<string, PoolEntry>()
    const tracked = new Set<AgentConnection>()
    /** Sockets announced before their upgrade is answered (`announce`): environment key -> socket ids. */
    const announced = new Map<string, { readonly agentId: string; readonly environmentId: string; readonly ids: Set<string> }>()
    const listeners = new Set<(agentId: string, environmentId: string) => void>()
    let accepting = true
    let socketCount = 0

    const changed = (entry: { readonly agentId: string; readonly environmentId: string }) => {
      for (const listener of listeners) listener(entry.agentId, entry.environmentId)
    }

    const forget = (key: string, socketId: string) => {
      const entry = idle.get(key)
      if (entry === undefined || !entry.sockets.delete(socketId)) return
      if (entry.sockets.size === 0) idle.delete(key)
      changed(entry)
    }

    // This run's mark in every socket id: a restart under the same INSTANCE_ID numbers its sockets
    // from 1 again, and the previous run's reservations (held up to RESERVATION_HOLD_MS) must not
    // hold this run's sockets.
    const life = startedAt.getTime().toString(36)
    const nextSocketId = () => `${instanceId}.${life}.${String(++socketCount).padStart(10, "0")}`
    const withdrawAnnounced = (key: string, socketId: string): boolean => {
      const entry = announced.get(key)
      if (entry === undefined || !entry.ids.delete(socketId)) return false
      if (entry.ids.size === 0) announced.delete(key)
      return true
    }

    const track = (connection: AgentConnection) => void tracked.add(connection)

    const beat = () => {
      for (const connection of tracked) if (!connection.heartbeat()) tracked.delete(connection)
    }

    const idleTotal = () => {
      let total = 0
      for (const entry of idle.values()) total += entry.sockets.size
      return total
    }

    sampledGaugeOn(metrics.registry, "callgate_agent_idle_connections", "Dial-in agent WebSockets waiting for a call", idleTotal)

    yield* Effect.forkScoped(repeatSpaced(Effect.sync(beat), Duration.max(config.agentPingInterval, Duration.millis(10))))

    const closeIdle = (reason: string) => {
      const entries = [...idle.values()]
      idle.clear()
      const pending = [...announced.values()]
      announced.clear()
      for (const entry of pending) changed(entry)
      for (const entry of entries) {
        for (const connection of entry.sockets.values()) {
          connection.onIdleClose = undefined
          connection.finish(CloseCode.goingAway, reason)
        }
        changed(entry)
      }
    }

    const takeFrom = (key: string, entry: PoolEntry, socketId: string, connection: AgentConnection) => {
      entry.sockets.delete(socketId)
      if (entry.sockets.size === 0) idle.delete(key)
      connection.onIdleClose = undefined
      changed(entry)
      return Option.some(connection)
    }
    yield* Effect.addFinalizer(() => Effect.sync(() => closeIdle("callgate is shutting down")))

    return {
      /**
       * Announces a dial-in socket before its upgrade is answered: its id is listed with the idle
       * ones (so the fleet's registry has it by the time the agent sees the socket open) but
       * nothing takes it until `offer` brings the connection; `withdraw` drops it if none comes.
       */
      announce: (agentId: string, environmentId: string): string => {
        const key = environmentKey(agentId, environmentId)
        const socketId = nextSocketId()
        let entry = announced.get(key)
        if (entry === undefined) announced.set(key, (entry = { agentId, environmentId, ids: new Set() }))
        entry.ids.add(socketId)
        changed({ agentId, environmentId })
        return socketId
      },
      /** Drops an announced socket whose connection never came (the upgrade failed); no-op once offered. */
      withdraw: (agentId: string, environmentId: string, socketId: string): void => {
        if (withdrawAnnounced(environmentKey(agentId, environmentId), socketId)) changed({ agentId, environmentId })
      },
      /**
       * Adds an authenticated dial-in socket as capacity (under its announced id, when it was
       * announced); false (and closed) while shutting down.
       */
      offer: (agentId: string, environmentId: string, connection: AgentConnection, announcedId?: string): boolean => {
        const key = environmentKey(agentId, environmentId)
        const wasAnnounced = announcedId !== undefined && withdrawAnnounced(key, announcedId)
        if (!accepting) {
          connection.finish(CloseCode.tryAgainLater, "callgate is shutting down: connect to another instance")
          if (wasAnnounced) changed({ agentId, environmentId })
          return false
        }
        let entry = idle.get(key)
        if (entry === undefined) idle.set(key, (entry = { agentId, environmentId, sockets: new Map() }))
        const socketId = wasAnnounced ? announcedId : nextSocketId()
        entry.sockets.set(socketId, connection)
        connection.onIdleClose = () => forget(key, socketId)
        track(connection)
        changed(entry)
        return true
      },
      /**
       * Takes the reserved socket `socketId` when it is still idle here, otherwise (or without one)
       * the oldest live idle socket of the environment, for one call.
       */
      take: (agentId: string, environmentId: string, socketId?: string): Option.Option<AgentConnection> => {
        const key = environmentKey(agentId, environmentId)
        const entry = idle.get(key)
        if (entry === undefined) return Option.none()
        if (socketId !== undefined) {
          const reserved = entry.sockets.get(socketId)
          if (reserved !== undefined && reserved.isIdle) return takeFrom(key, entry, socketId, reserved)
        }
        for (const [id, connection] of entry.sockets) {
          if (connection.isIdle) return takeFrom(key, entry, id, connection)
          entry.sockets.delete(id)
        }
        idle.delete(key)
        changed(entry)
        return Option.none()
      },
      /** Every environment's idle sockets (and announced ones), by id. */
      idleSockets: (): Array<IdleSockets> => {
        const all = new Map<string, IdleSockets>()
        for (const [key, entry] of idle) all.set(key, { agentId: entry.agentId, environmentId: entry.environmentId, sockets: [...entry.sockets.keys()] })
        for (const [key, { agentId, environmentId, ids }] of announced) {
          all.set(key, { agentId, environmentId, sockets: [...(all.get(key)?.sockets ?? []), ...ids] })
        }
        return [...all.values()]
      },
      /** One environment's idle sockets (and announced ones), by id. */
      idleSocketsOf: (agentId: string, environmentId: string): Array<string> => {
        const key = environmentKey(agentId, environmentId)
        return [...(idle.get(key)?.sockets.keys() ?? []), ...(announced.get(key)?.ids ?? [])]
      },
      /** Calls `listener` whenever an environment's idle sockets change (synchronously: keep it cheap). */
      onChange: (listener: (agentId: string, environmentId: string) => void): (() => void) => {
        listeners.add(listener)
        return () => void listeners.delete(listener)
      },
      /** Pings a dial-out socket too, for as long as it is open. */
      track,
      idleCount: (agentId: string, environmentId: string): number => idle.get(environmentKey(agentId, environmentId))?.sockets.size ?? 0,
      /** Shutdown: refuse new dial-in sockets and release the idle ones so workers reconnect elsewhere. */
      stopAccepting: Effect.sync(() => {
        accepting = false
        closeIdle("callgate is shutting down: connect to another instance")
      }),
      isAccepting: (): boolean => accepting
    } as const
  })
}) {}
