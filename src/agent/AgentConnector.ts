import { Duration, Effect, Option, Schedule } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { HardError } from "../kernel/HardError.js"
import type { AgentConnection } from "./AgentConnection.js"
import { AgentDialer } from "./AgentDialer.js"
import { AgentPool } from "./AgentPool.js"

export interface AgentTarget {
  readonly agentId: string
  readonly environmentId: string
  /** The environment's agentUrl: dial out when set, else take an idle dial-in socket. */
  readonly agentUrl: string | null
  /** See SessionInfo.reservedAgent: the socket placement reserved, null for none anywhere. */
  readonly reservedAgent?: string | null | undefined
  /** The environment's agentAudioFormat: true when its agents speak only 8 kHz mu-law. */
  readonly agentSpeaksMulaw?: boolean | undefined
  /** The environment's agentFailoverTimeout, seconds (0: no failover). */
  readonly failoverTimeoutSeconds?: number | undefined
}

/**
 * Finds the agent for one call (docs/calls.md, "Agents"): dial-out to agentUrl when the environment
 * has one, otherwise an idle dial-in socket taken at once (the one placement reserved, when it
 * is still idle; none when placement found no idle agent in the whole fleet). No agent is a HardError, never a wait:
 * the caller is on the line.
 */
export class AgentConnector extends Effect.Service<AgentConnector>()("callgate/AgentConnector", {
  effect: Effect.gen(function* () {
    const pool = yield* AgentPool
    const config = yield* AppConfig
    const dialer = yield* AgentDialer

    const acquire = (target: AgentTarget): Effect.Effect<AgentConnection, HardError> => {
      if (target.agentUrl !== null) {
        return dialer.dial(target.agentUrl, config.agentConnectTimeout).pipe(Effect.tap((connection) => pool.track(connection)))
      }
      const taken =
        target.reservedAgent === null ? Option.none() : pool.take(target.agentId, target.environmentId, target.reservedAgent)
      return Option.match(taken, {
        onSome: Effect.succeed,
        onNone: () =>
          Effect.fail(
            new HardError({
              kind: "no_idle_agent",
              message: `No agent connection was idle for environment ${target.environmentId} of agent ${target.agentId}.`
            })
          )
      })
    }

    /** Succeeds once the environment has an idle dial-in socket here (at once when it has one now). */
    const idleHere = (agentId: string, environmentId: string): Effect.Effect<void> =>
      Effect.async<void>((resume) => {
        if (pool.idleCount(agentId, environmentId) > 0) return resume(Effect.void)
        const stop = pool.onChange((changedAgent, changedEnvironment) => {
          if (changedAgent !== agentId || changedEnvironment !== environmentId || pool.idleCount(agentId, environmentId) === 0) return
          stop()
          resume(Effect.void)
        })
        return Effect.sync(stop)
      })

    /** Takes an idle dial-in socket of the environment, waiting for one to connect (or come free). */
    const takeIdle = (agentId: string, environmentId: string): Effect.Effect<AgentConnection> =>
      Effect.suspend(() => {
        const taken = pool.take(agentId, environmentId)
        if (Option.isSome(taken)) return Effect.succeed(taken.value)
        return Effect.zipRight(idleHere(agentId, environmentId), takeIdle(agentId, environmentId))
      })

    /** Dial-out again and again, backing off (100 ms doubling, at most 1 s apart), until one connects. */
    const redial = (url: string): Effect.Effect<AgentConnection> =>
      dialer.dial(url, config.agentConnectTimeout).pipe(
        Effect.retry(Schedule.exponential(Duration.millis(100)).pipe(Schedule.either(Schedule.spaced(Duration.seconds(1))))),
        Effect.orDie,
        Effect.tap((connection) => pool.track(connection))
      )

    /**
     * The next agent of a call whose agent leg failed (docs/design.md, "The path of a failover"): an
     * idle dial-in socket of the environment on this instance, taken as placement would, waiting
     * for one to connect; or, for a dial-out environment, a new connection to agentUrl, retried
     * with backoff. None within `within`: `no_idle_agent` / `agent_dial_failed`.
     */
    const seek = (target: AgentTarget, within: Duration.Duration): Effect.Effect<AgentConnection, HardError> =>
      (target.agentUrl !== null ? redial(target.agentUrl) : takeIdle(target.agentId, target.environmentId)).pipe(
        Effect.timeoutFail({
          duration: within,
          onTimeout: () =>
            target.agentUrl !== null
              ? new HardError({ kind: "agent_dial_failed", message: `No agent answered at the environment's agentUrl within ${Duration.format(within)} of the failover.` })
              : new HardError({
                  kind: "no_idle_agent",
                  message: `No agent connection of environment ${target.environmentId} came free within ${Duration.format(within)} of the failover.`
                })
        })
      )

    /** Whether another dial-in agent of the environment is idle here now (a stalled agent's call can move to it). */
    const anotherIdle = (agentId: string, environmentId: string): boolean => pool.idleCount(agentId, environmentId) > 0

    return { acquire, seek, anotherIdle } as const
  })
}) {}
