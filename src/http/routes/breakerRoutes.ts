import { Effect, Schema } from "effect"
import { BreakerStore } from "../../breaker/BreakerStore.js"
import { EnvironmentParams } from "../../environments/EnvironmentSchema.js"
import { Environments } from "../../environments/Environments.js"
import { apiRoute } from "../ApiRoute.js"
import { isoAt } from "../../kernel/Time.js"


export const BreakerStateView = Schema.Struct({
  agentId: Schema.String,
  environmentId: Schema.String,
  state: Schema.Literal("closed", "open", "probing").annotations({
    description:
      "closed; open: occurrences at or over the threshold in the window, no voiced answer since; probing: open, and a probe call (one per BREAKER_PROBE_INTERVAL) is with an agent"
  }),
  shedNewCalls: Schema.Boolean.annotations({ description: "errorFallbackShedNewCalls: while open, new calls get the error fallback in the entry answer" }),
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
    summary: "The no-response breaker now: its state, occurrences in the window against the threshold, and the last trip",
    tag: "environments",
    auth: "agent",
    params: EnvironmentParams,
    response: BreakerStateView,
    handler: ({ params }) =>
      Effect.gen(function* () {
        const env = yield* Effect.flatMap(Environments, (envs) => envs.get(params.agentId, params.environmentId))
        const store = yield* BreakerStore
        const state = yield* store.state(params.agentId, params.environmentId, env.errorFallbackTimeWindow)
        const open = state.occurrences >= env.errorFallbackOccurrenceThreshold
        const probe = open ? yield* store.probe(params.agentId, params.environmentId) : null
        return {
          agentId: params.agentId,
          environmentId: params.environmentId,
          state: !open ? ("closed" as const) : probe === null ? ("open" as const) : ("probing" as const),
          shedNewCalls: env.errorFallbackShedNewCalls,
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
