import { Effect, Schema } from "effect"
import { ApiKeyIdParams, ApiKeyInfoView, ApiKeys, ApiKeyView, CreateApiKeyBody, RotateApiKeyBody } from "../../apikeys/ApiKeys.js"
import { apiRoute } from "../ApiRoute.js"

const RotatedApiKeyView = Schema.Struct({
  ...ApiKeyView.fields,
  previousKeyValidUntil: Schema.NullOr(Schema.String).annotations({ description: "Until when the old key still works; null: it stopped at once" })
}).annotations({ identifier: "RotatedApiKey" })

/** Scoped API keys, admin only (docs/api.md, "API keys"). */
export const apiKeyRoutes = [
  apiRoute({
    method: "POST",
    path: "/v1/api-keys",
    summary: "Create an API key scoped to some agents (admin only); the key is shown once",
    tag: "api-keys",
    auth: "admin",
    body: CreateApiKeyBody,
    response: ApiKeyView,
    successStatus: 201,
    handler: ({ body }) => Effect.flatMap(ApiKeys, (keys) => keys.create(body))
  }),
  apiRoute({
    method: "GET",
    path: "/v1/api-keys",
    summary: "List the scoped API keys (admin only): name, id, agents, created, expiry, last used; never the key",
    tag: "api-keys",
    auth: "admin",
    response: Schema.Array(ApiKeyInfoView),
    handler: () => Effect.flatMap(ApiKeys, (keys) => keys.list)
  }),
  apiRoute({
    method: "DELETE",
    path: "/v1/api-keys/:keyId",
    summary: "Revoke an API key (admin only): refused at once by every instance, its open agent sockets closed",
    tag: "api-keys",
    auth: "admin",
    params: ApiKeyIdParams,
    successStatus: 204,
    handler: ({ params }) => Effect.flatMap(ApiKeys, (keys) => keys.revoke(params.keyId))
  }),
  apiRoute({
    method: "POST",
    path: "/v1/api-keys/:keyId/rotate",
    summary: "Rotate an API key (admin only): a new key, shown once; the old one works for graceSeconds more (default 0)",
    tag: "api-keys",
    auth: "admin",
    params: ApiKeyIdParams,
    body: RotateApiKeyBody,
    response: RotatedApiKeyView,
    successStatus: 200,
    handler: ({ params, body }) => Effect.flatMap(ApiKeys, (keys) => keys.rotate(params.keyId, body))
  })
]
