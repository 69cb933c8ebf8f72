import { Effect, Schema } from "effect"
import { BreakerStore } from "../../breaker/BreakerStore.js"
import { EnvironmentParams } from "../../environments/EnvironmentSchema.js"
import { Environments } from "../../environments/Environments.js"
import { apiRoute } from "../ApiRoute.js"
import { isoAt } from "../../kernel/Time.js"


export const BreakerStateView = Schema.Struct({
  agentId: Schema.String,
  environmentId: Schema.String,
  noResponseTrigger: Schema.Literal("on", "off").annotations({ description: "off while errorFallbackTimeout is 0" }),
  timeoutSeconds: Schema.Number.annotations({ description: "errorFallbackTimeout" }),
  threshold: Schema.Number.annotations({ description: "errorFallbackOccurrenceThreshold" }),
  windowSeconds: Schema.Number.annotations({ description: "errorFallbackTimeWindow" }),
  occurrences: Schema.Number.annotations({ description: "No-response occurrences (distinct sessions) within the window now" }),
  newestOccurrenceAt: Schema.NullOr(Schema.String).annotations({ description: "ISO 8601: the newest counted occurrence" }),
  lastTrip: Schema.NullOr(
    Schema.Struct({
      at: Schema.String.annotations({ description: "ISO 8601" }),
      sessionId: Schema.String.annotations({ description: "The session whose occurrence reached the threshold" }),
      count: Schema.Number,
      threshold: Schema.Number
    })
  ).annotations({ description: "The environment's most recent trip (kept 30 days), null when none" })
}).annotations({ identifier: "BreakerState" })

export const breakerRoutes = [
  apiRoute({
    method: "GET",
    path: "/v1/agents/:agentId/environments/:environmentId/breaker",
    summary: "The no-response breaker now: occurrences in the window against the threshold, and the last trip",
    tag: "environments",
    auth: "agent",
    params: EnvironmentParams,
    response: BreakerStateView,
    handler: ({ params }) =>
      Effect.gen(function* () {
        const env = yield* Effect.flatMap(Environments, (envs) => envs.get(params.agentId, params.environmentId))
        const store = yield* BreakerStore
        const state = yield* store.state(params.agentId, params.environmentId, env.errorFallbackTimeWindow)
        return {
          agentId: params.agentId,
          environmentId: params.environmentId,
          noResponseTrigger: env.errorFallbackTimeout > 0 ? ("on" as const) : ("off" as const),
          timeoutSeconds: env.errorFallbackTimeout,
          threshold: env.errorFallbackOccurrenceThreshold,
          windowSeconds: env.errorFallbackTimeWindow,
          occurrences: state.occurrences,
          newestOccurrenceAt: state.newestAt === null ? null : isoAt(state.newestAt),
          lastTrip: state.lastTrip === null ? null : { ...state.lastTrip, at: isoAt(state.lastTrip.at) }
        }
      })
  })
]
