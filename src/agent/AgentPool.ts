import { Duration, Effect, Option, Schedule } from "effect"
import { Gauge } from "prom-client"
import { AppConfig } from "../config/AppConfig.js"
import { Metrics } from "../observability/Metrics.js"
import { CloseCode } from "../core/WireSocket.js"
import type { AgentConnection } from "./AgentConnection.js"
import { environmentKey } from "../core/EnvironmentKey.js"


/**
 * Dial-in capacity: the idle agent sockets of each environment, oldest first. Each one serves one
 * call: `take` hands it out and forgets it. Every agent socket callgate holds (idle, in a call,
 * or dialled out) is pinged every AGENT_PING_INTERVAL; one that missed the previous pong is cut,
 * which removes it from the pool (idle) or fails its call (bound).
 */
export class AgentPool extends Effect.Service<AgentPool>()("callgate/AgentPool", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const metrics = yield* Metrics
    const idle = new Map<string, Set<AgentConnection>>()
    const tracked = new Set<AgentConnection>()
    let accepting = true

    const forget = (key: string, connection: AgentConnection) => {
      const set = idle.get(key)
      if (set === undefined) return
      set.delete(connection)
      if (set.size === 0) idle.delete(key)
    }

    const track = (connection: AgentConnection) => void tracked.add(connection)

    const beat = () => {
      for (const connection of tracked) if (!connection.heartbeat()) tracked.delete(connection)
    }

    const idleTotal = () => {
      let total = 0
      for (const set of idle.values()) total += set.size
      return total
    }

    new Gauge({
      name: "callgate_agent_idle_connections",
      help: "Dial-in agent WebSockets waiting for a call",
      registers: [metrics.registry],
      collect() {
        this.set(idleTotal())
      }
    })

    yield* Effect.sync(beat).pipe(
      Effect.repeat(Schedule.spaced(Duration.max(config.agentPingInterval, Duration.millis(10)))),
      Effect.forkScoped
    )

    const closeIdle = (reason: string) => {
      for (const set of idle.values()) for (const connection of set) connection.finish(CloseCode.goingAway, reason)
      idle.clear()
    }
    yield* Effect.addFinalizer(() => Effect.sync(() => closeIdle("callgate is shutting down")))

    return {
      /** Adds an authenticated dial-in socket as capacity; false (and closed) while shutting down. */
      offer: (agentId: string, environmentId: string, connection: AgentConnection): boolean => {
        if (!accepting) {
          connection.finish(CloseCode.tryAgainLater, "callgate is shutting down: connect to another instance")
          return false
        }
        const key = environmentKey(agentId, environmentId)
        let set = idle.get(key)
        if (set === undefined) idle.set(key, (set = new Set()))
        set.add(connection)
        connection.onIdleClose = () => forget(key, connection)
        track(connection)
        return true
      },
      /** Takes the oldest live idle socket of the environment, for one call. */
      take: (agentId: string, environmentId: string): Option.Option<AgentConnection> => {
        const key = environmentKey(agentId, environmentId)
        const set = idle.get(key)
        if (set === undefined) return Option.none()
        for (const connection of set) {
          set.delete(connection)
          if (connection.isIdle) {
            if (set.size === 0) idle.delete(key)
            connection.onIdleClose = undefined
            return Option.some(connection)
          }
        }
        idle.delete(key)
        return Option.none()
      },
      /** Pings a dial-out socket too, for as long as it is open. */
      track,
      idleCount: (agentId: string, environmentId: string): number => idle.get(environmentKey(agentId, environmentId))?.size ?? 0,
      /** Shutdown: refuse new dial-in sockets and release the idle ones so workers reconnect elsewhere. */
      stopAccepting: Effect.sync(() => {
        accepting = false
        closeIdle("callgate is shutting down: connect to another instance")
      }),
      isAccepting: (): boolean => accepting
    } as const
  })
}) {}
