import { Effect, Schema } from "effect"
import { mayActFor } from "../../apikeys/ApiKeys.js"
import { Environments } from "../../environments/Environments.js"
import { apiRoute } from "../ApiRoute.js"

const AgentSummary = Schema.Struct({
  agentId: Schema.String,
  environments: Schema.Number.annotations({ description: "How many environments the agent has" })
}).annotations({ identifier: "AgentSummary" })

const KeyScope = Schema.Union(
  Schema.Struct({ kind: Schema.Literal("admin") }).annotations({ description: "The admin key: every agent" }),
  Schema.Struct({ kind: Schema.Literal("scoped"), agentIds: Schema.Array(Schema.String) }).annotations({
    description: "A scoped key: only these agents (listed here even before they have environments)"
  })
).annotations({ identifier: "KeyScope" })

export const AgentListView = Schema.Struct({
  agents: Schema.Array(AgentSummary).annotations({ description: "Agents that have environments and that the key may act for, by agent id" }),
  scope: KeyScope
}).annotations({ identifier: "AgentList" })

export const agentListRoutes = [
  apiRoute({
    method: "GET",
    path: "/v1/agents",
    summary: "List the agents that have environments, with counts, as far as the key's scope reaches",
    tag: "agents",
    auth: "any",
    response: AgentListView,
    handler: ({ principal }) =>
      Effect.flatMap(Environments, (envs) => envs.listAgents).pipe(
        Effect.map((agents) => ({
          agents: agents.filter((agent) => mayActFor(principal, agent.agentId)),
          scope: principal.kind === "admin" ? { kind: "admin" as const } : { kind: "scoped" as const, agentIds: [...principal.agentIds] }
        }))
      )
  })
]
