import { Effect, Option } from "effect"
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

    return { acquire } as const
  })
}) {}
