import { Schema } from "effect"
import {
  AgentParams,
  CloneEnvironmentBody,
  CreateEnvironmentBody,
  EnvironmentParams,
  EnvironmentView,
  UpdateEnvironmentBody
} from "../../environments/EnvironmentSchema.js"
import { Environments } from "../../environments/Environments.js"
import { apiRoute } from "../ApiRoute.js"
import { Effect } from "effect"

const base = "/v1/agents/:agentId/environments"
const one = `${base}/:environmentId`

export const environmentRoutes = [
  apiRoute({
    method: "POST",
    path: base,
    summary: "Create an environment",
    tag: "environments",
    auth: "agent",
    params: AgentParams,
    body: CreateEnvironmentBody,
    response: EnvironmentView,
    successStatus: 201,
    handler: ({ body, params }) => Effect.flatMap(Environments, (envs) => envs.create(params.agentId, body))
  }),
  apiRoute({
    method: "GET",
    path: base,
    summary: "List the agent's environments",
    tag: "environments",
    auth: "agent",
    params: AgentParams,
    response: Schema.Array(EnvironmentView),
    handler: ({ params }) => Effect.flatMap(Environments, (envs) => envs.list(params.agentId))
  }),
  apiRoute({
    method: "GET",
    path: one,
    summary: "Get an environment",
    tag: "environments",
    auth: "agent",
    params: EnvironmentParams,
    response: EnvironmentView,
    handler: ({ params }) => Effect.flatMap(Environments, (envs) => envs.get(params.agentId, params.environmentId))
  }),
  apiRoute({
    method: "PATCH",
    path: one,
    summary: "Update an environment (event webhook, error fallback, agent URL)",
    tag: "environments",
    auth: "agent",
    params: EnvironmentParams,
    body: UpdateEnvironmentBody,
    response: EnvironmentView,
    handler: ({ body, params }) => Effect.flatMap(Environments, (envs) => envs.update(params.agentId, params.environmentId, body))
  }),
  apiRoute({
    method: "DELETE",
    path: one,
    summary: "Delete an environment",
    tag: "environments",
    auth: "agent",
    params: EnvironmentParams,
    successStatus: 204,
    handler: ({ params }) => Effect.flatMap(Environments, (envs) => envs.remove(params.agentId, params.environmentId))
  }),
  apiRoute({
    method: "POST",
    path: `${one}/regenerate-webhook-secret`,
    summary: "Replace the event webhook secret",
    tag: "environments",
    auth: "agent",
    params: EnvironmentParams,
    response: Schema.Struct({ webhookSecret: Schema.String }),
    handler: ({ params }) =>
      Effect.flatMap(Environments, (envs) => envs.regenerateWebhookSecret(params.agentId, params.environmentId)).pipe(
        Effect.map((webhookSecret) => ({ webhookSecret }))
      )
  }),
  apiRoute({
    method: "POST",
    path: `${one}/regenerate-error-fallback-webhook-secret`,
    summary: "Replace the error fallback webhook secret; the old one stops verifying at once",
    tag: "environments",
    auth: "agent",
    params: EnvironmentParams,
    response: Schema.Struct({ errorFallbackWebhookSecret: Schema.String }),
    handler: ({ params }) =>
      Effect.flatMap(Environments, (envs) => envs.regenerateErrorFallbackWebhookSecret(params.agentId, params.environmentId)).pipe(
        Effect.map((errorFallbackWebhookSecret) => ({ errorFallbackWebhookSecret }))
      )
  }),
  apiRoute({
    method: "POST",
    path: `${one}/clone`,
    summary: "Clone an environment; the clone gets new secrets, never the source's",
    tag: "environments",
    auth: "agent",
    params: EnvironmentParams,
    body: CloneEnvironmentBody,
    response: EnvironmentView,
    successStatus: 201,
    handler: ({ body, params }) =>
      Effect.flatMap(Environments, (envs) => envs.clone(params.agentId, params.environmentId, body.name))
  })
]

/** Moved to their own module; re-exported for existing importers. */
export { apiKeyRoutes } from "./apiKeyRoutes.js"
