import { Effect, Schema } from "effect"
import { ResourceId } from "../../environments/EnvironmentSchema.js"
import { DeliveryPage, DeliveryView } from "../../webhooks/Delivery.js"
import { Deliveries } from "../../webhooks/Deliveries.js"
import { apiRoute } from "../ApiRoute.js"

const base = "/v1/agents/:agentId/environments/:environmentId/webhook-deliveries"

const ListParams = Schema.Struct({ agentId: ResourceId, environmentId: ResourceId })
const DeliveryParams = Schema.Struct({
  agentId: ResourceId,
  environmentId: ResourceId,
  deliveryId: Schema.String.pipe(
    Schema.pattern(/^[A-Za-z0-9_-]{1,64}$/, { message: () => "is not a delivery id" })
  )
})

const ListQuery = Schema.Struct({
  limit: Schema.optional(
    Schema.NumberFromString.pipe(
      Schema.int({ message: () => "must be an integer" }),
      Schema.between(1, 100, { message: () => "must be an integer from 1 to 100" })
    )
  ).annotations({ description: "Page size, 1 to 100 (default 20)" }),
  cursor: Schema.optional(
    Schema.String.pipe(Schema.pattern(/^\d{1,15}$/, { message: () => "is not a cursor returned by this endpoint" }))
  ).annotations({ description: "nextCursor from the previous page" })
})

export const deliveryRoutes = [
  apiRoute({
    method: "GET",
    path: base,
    summary: "List the environment's event webhook deliveries, newest first, with every attempt",
    tag: "webhook-deliveries",
    auth: "agent",
    params: ListParams,
    query: ListQuery,
    response: DeliveryPage,
    handler: ({ params, query }) =>
      Effect.flatMap(Deliveries, (deliveries) =>
        deliveries.list(params.agentId, params.environmentId, { limit: query.limit ?? 20, cursor: query.cursor })
      )
  }),
  apiRoute({
    method: "POST",
    path: `${base}/:deliveryId/retry`,
    summary: "Queue a new attempt of a settled delivery now (409 while it is pending)",
    tag: "webhook-deliveries",
    auth: "agent",
    params: DeliveryParams,
    response: DeliveryView,
    successStatus: 202,
    handler: ({ params }) =>
      Effect.flatMap(Deliveries, (deliveries) => deliveries.retry(params.agentId, params.environmentId, params.deliveryId))
  })
]
