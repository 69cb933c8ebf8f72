import type { Readable } from "node:stream"
import type { Effect, Schema } from "effect"
import type { Principal } from "../apikeys/ApiKeys.js"

/**
 * A /v1 route as data: the same schemas validate the request and describe it in the OpenAPI
 * document, so the two cannot drift. `auth: "agent"` routes carry `:agentId` and accept the admin
 * key or a key scoped to that agent; `auth: "admin"` routes accept only the admin key; `auth: "any"`
 * routes accept any valid key and narrow what they answer to the key's scope themselves.
 */
export interface ApiRoute<R> {
  readonly method: "GET" | "POST" | "PATCH" | "DELETE"
  readonly path: string
  readonly summary: string
  readonly tag: string
  readonly auth: "admin" | "agent" | "any"
  readonly params?: Schema.Schema<any, any>
  readonly query?: Schema.Schema<any, any>
  readonly body?: Schema.Schema<any, any>
  readonly response?: Schema.Schema<any, any>
  readonly successStatus?: 200 | 201 | 202 | 204
  /** A route answering bytes, not JSON: its handler returns a RawResponse (the OpenAPI document names the type). */
  readonly produces?: { readonly contentType: string; readonly description: string }
  readonly handler: (input: {
    readonly params: any
    readonly query: any
    readonly body: any
    readonly principal: Principal
    readonly headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>
  }) => Effect.Effect<unknown, unknown, R>
}

/** What a `produces` route's handler returns: sent as is, without the JSON envelope. */
export interface RawResponse {
  readonly status: 200 | 206 | 416
  readonly headers: Readonly<Record<string, string>>
  readonly body: Readable | undefined
}

type Input<P, Q, B> = {
  readonly params: P
  readonly query: Q
  readonly body: B
  readonly principal: Principal
  readonly headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>
}

/** Declares a route with its handler's input typed from its schemas. */
export const apiRoute = <R, P = unknown, Q = unknown, B = unknown>(definition: {
  readonly method: ApiRoute<R>["method"]
  readonly path: string
  readonly summary: string
  readonly tag: string
  readonly auth: "admin" | "agent" | "any"
  readonly params?: Schema.Schema<P, any>
  readonly query?: Schema.Schema<Q, any>
  readonly body?: Schema.Schema<B, any>
  readonly response?: Schema.Schema<any, any>
  readonly successStatus?: 200 | 201 | 202 | 204
  readonly produces?: ApiRoute<R>["produces"]
  readonly handler: (input: Input<P, Q, B>) => Effect.Effect<unknown, unknown, R>
}): ApiRoute<R> => definition as ApiRoute<R>

/*
 * The route table's machinery lives beside this file, one job each: ApiAuth.ts (who may call),
 * RouteRegistration.ts (validation, handler, envelope), DomainErrors.ts (domain failures to
 * HTTP), OpenApiDocument.ts (the document), ValidationMessages.ts (the house style of
 * validation errors). Re-exported here for route modules written against this file.
 */
export { authenticationHook, authorize, principalOf, rateLimitKeyOf, tooManyFailures } from "./ApiAuth.js"
export { sendError, toApiError } from "./DomainErrors.js"
export { openApiDocument } from "./OpenApiDocument.js"
export { registerApiRoutes } from "./RouteRegistration.js"
