import type { Readable } from "node:stream"
import type { Effect, Schema } from "effect"
import type { Principal } from "../apikeys/ApiKeys.js"
import type { RouteError } from "./DomainErrors.js"

/** What a route's handler is given: its params, query and body decoded by its schemas, the request's headers, and who calls. */
export interface RouteInput<P, Q, B> {
  readonly params: P
  readonly query: Q
  readonly body: B
  readonly principal: Principal
  readonly headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>
}

/** What a `produces` route's handler returns: sent as is, without the JSON envelope. */
export interface RawResponse {
  readonly status: 200 | 206 | 416
  readonly headers: Readonly<Record<string, string>>
  readonly body: Readable | undefined
}

/** A route's declaration, typed from its schemas: the handler's input is what the schemas decode, its answer what `response` encodes. */
export interface RouteDefinition<P, Q, B, A, R> {
  readonly method: "GET" | "POST" | "PATCH" | "DELETE"
  readonly path: string
  readonly summary: string
  readonly tag: string
  readonly auth: "admin" | "agent" | "any"
  readonly params?: Schema.Schema<P, any>
  readonly query?: Schema.Schema<Q, any>
  readonly body?: Schema.Schema<B, any>
  readonly response?: Schema.Schema<A, any>
  readonly successStatus?: 200 | 201 | 202 | 204
  /** A route answering bytes, not JSON: its handler returns a RawResponse (the OpenAPI document names the type). */
  readonly produces?: { readonly contentType: string; readonly description: string }
  readonly handler: (input: RouteInput<P, Q, B>) => Effect.Effect<A, RouteError, R>
}

/**
 * A /v1 route as data: the same schemas validate the request and describe it in the OpenAPI
 * document, so the two cannot drift. `auth: "agent"` routes carry `:agentId` and accept the admin
 * key or a key scoped to that agent; `auth: "admin"` routes accept only the admin key; `auth: "any"`
 * routes accept any valid key and narrow what they answer to the key's scope themselves.
 *
 * The table holds routes of different input types side by side, so its element forgets them
 * (`unknown`); `apiRoute` is the only way to make one, and it types the handler from the very
 * schemas RouteRegistration decodes with, so the handler never sees a value its types do not say.
 */
export type ApiRoute<R> = RouteDefinition<unknown, unknown, unknown, unknown, R>

/**
 * Declares a route with its handler typed from its schemas. The handler's failure must be a
 * `RouteError` (a domain error with an HTTP answer in DomainErrors.ts, or an ApiError): any other
 * failure is a compile error.
 */
export const apiRoute = <P = undefined, Q = undefined, B = undefined, A = void, R = never>(
  definition: RouteDefinition<P, Q, B, A, R>
): ApiRoute<R> => definition as unknown as ApiRoute<R>

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
