import { Effect, Schema } from "effect"
import { AgentPool } from "../../agent/AgentPool.js"
import { EnvironmentParams } from "../../environments/EnvironmentSchema.js"
import { Environments } from "../../environments/Environments.js"
import { apiRoute } from "../ApiRoute.js"

export const AgentCapacityView = Schema.Struct({
  idle: Schema.Number.annotations({
    description: "Dial-in agent sockets of the environment waiting for a call on the instance that answered (each takes one call)"
  })
}).annotations({ identifier: "AgentCapacity" })

/** Dial-in capacity, for `callgate-sim --wait-for-agent` and for operators (docs/calls.md, "Agents"). */
export const agentPoolRoutes = [
  apiRoute({
    method: "GET",
    path: "/v1/agents/:agentId/environments/:environmentId/agents",
    summary: "Idle dial-in agent sockets of the environment on this instance",
    tag: "environments",
    auth: "agent",
    params: EnvironmentParams,
    response: AgentCapacityView,
    handler: ({ params }) =>
      Effect.gen(function* () {
        yield* Effect.flatMap(Environments, (envs) => envs.get(params.agentId, params.environmentId))
        const pool = yield* AgentPool
        return { idle: pool.idleCount(params.agentId, params.environmentId) }
      })
  })
]
