import { Cause, Effect, Exit, JSONSchema, Option, Runtime, Schema } from "effect"
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify"
import { ApiKeys, mayActFor, type Principal } from "../apikeys/ApiKeys.js"
import { ApiError, ErrorBody, fromParseError } from "./ApiError.js"

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
  readonly handler: (input: {
    readonly params: any
    readonly query: any
    readonly body: any
    readonly principal: Principal
  }) => Effect.Effect<unknown, unknown, R>
}

type Input<P, Q, B> = { readonly params: P; readonly query: Q; readonly body: B; readonly principal: Principal }

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
  readonly handler: (input: Input<P, Q, B>) => Effect.Effect<unknown, unknown, R>
}): ApiRoute<R> => definition as ApiRoute<R>

/**
 * Maps the domain's failures to HTTP. Domain modules know nothing of HTTP; each concern adds the
 * tags of its errors here.
 */
const domainErrors: Record<string, (error: any) => ApiError> = {
  EnvironmentNotFound: (e) => ApiError.of("NOT_FOUND", `Environment ${e.environmentId} of agent ${e.agentId} was not found.`),
  InvalidEnvironment: (e) => ApiError.of("VALIDATION_FAILED", `${e.details[0].field} ${e.details[0].message}`, e.details),
  StoreError: () => ApiError.of("UNAVAILABLE", "The store is unavailable; retry later."),
  NotFound: (e) => ApiError.of("NOT_FOUND", e.message),
  Conflict: (e) => ApiError.of("CONFLICT", e.message),
  DeliveryNotFound: (e) => ApiError.of("NOT_FOUND", `Webhook delivery ${e.deliveryId} was not found.`),
  DeliveryNotRetryable: (e) => ApiError.of("CONFLICT", `Webhook delivery ${e.deliveryId} cannot be retried: ${e.why}.`)
}

export const registerDomainError = (tag: string, toApiError: (error: any) => ApiError) => {
  domainErrors[tag] = toApiError
}

export const toApiError = (error: unknown): Option.Option<ApiError> => {
  if (error instanceof ApiError) return Option.some(error)
  const tag = typeof error === "object" && error !== null && "_tag" in error ? String(error._tag) : undefined
  const map = tag !== undefined ? domainErrors[tag] : undefined
  return map ? Option.some(map(error)) : Option.none()
}

const bearer = (request: FastifyRequest): string | undefined => {
  const header = request.headers.authorization
  if (typeof header !== "string") return undefined
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header)
  return match?.[1]
}

export const sendError = (reply: FastifyReply, error: ApiError) => reply.code(error.status).send(error.toBody())

/**
 * Authenticates a request with a bearer key; with `agentId`, also checks the key may act for it.
 * Shared by the JSON routes and the agent WebSocket.
 */
export const authorize = (apiKeys: ApiKeys, request: FastifyRequest, agentId?: string) =>
  Effect.gen(function* () {
    const presented = bearer(request)
    if (presented === undefined) return yield* Effect.fail(ApiError.of("UNAUTHORIZED"))
    const principal = yield* apiKeys.authenticate(presented)
    if (Option.isNone(principal)) return yield* Effect.fail(ApiError.of("UNAUTHORIZED", "The API key is not valid."))
    if (agentId !== undefined && !mayActFor(principal.value, agentId)) return yield* Effect.fail(ApiError.of("FORBIDDEN"))
    return principal.value
  })

const decode = <A>(where: "body" | "query" | "params", schema: Schema.Schema<A, any> | undefined, value: unknown) =>
  schema === undefined
    ? Effect.succeed(undefined as A)
    : Schema.decodeUnknown(schema, { errors: "all", onExcessProperty: "error" })(value).pipe(
        Effect.mapError((error) => fromParseError(where, error))
      )

const isJson = (request: FastifyRequest) => {
  const type = request.headers["content-type"]
  return typeof type === "string" && /^application\/([a-z.+-]*\+)?json\b/i.test(type)
}

/** Who may call a route: any valid key, the admin key only, or a key that may act for `:agentId`. */
const authenticateRoute = (auth: ApiRoute<unknown>["auth"], request: FastifyRequest) =>
  Effect.gen(function* () {
    const apiKeys = yield* ApiKeys
    const rawParams = (request.params ?? {}) as Record<string, unknown>
    const agentId = auth === "agent" ? String(rawParams.agentId ?? "") : undefined
    const principal = yield* authorize(apiKeys, request, agentId)
    if (auth === "admin" && principal.kind !== "admin") {
      return yield* Effect.fail(ApiError.of("FORBIDDEN", "Only the admin key may use this route."))
    }
    return principal
  })

/** Known failures become their ApiError; anything else is logged and becomes a 500 that carries none of its details. */
const failureToApiError = async (run: (effect: Effect.Effect<void>) => Promise<unknown>, cause: Cause.Cause<unknown>, where: string) => {
  const failure = Cause.failureOption(cause).pipe(Option.flatMap(toApiError))
  if (Option.isSome(failure)) return failure.value
  await run(Effect.logError("request failed", { route: where }, cause))
  return ApiError.of("INTERNAL")
}

/** The principal each authenticated request was let in as, set by the onRequest hook. */
const principals = new WeakMap<FastifyRequest, Principal>()

/** Who an authenticated request was let in as (the agent WebSocket remembers its key). */
export const principalOf = (request: FastifyRequest): Principal | undefined => principals.get(request)

/**
 * A preParsing hook that authenticates before the body is read (and after the rate limiter's
 * onRequest hook), so a caller without a valid key learns nothing about validation and costs no
 * body parsing. A refusal is thrown as an ApiError, which the app's error handler answers. Also for
 * /v1 routes that are not `ApiRoute`s (`auth: "any"`: any valid key).
 */
export const authenticationHook = <R>(runtime: Runtime.Runtime<R | ApiKeys>, auth: ApiRoute<unknown>["auth"]) => {
  const run = Runtime.runPromiseExit(runtime)
  return async (request: FastifyRequest): Promise<undefined> => {
    const exit = await run(authenticateRoute(auth, request))
    if (Exit.isFailure(exit)) throw await failureToApiError(run, exit.cause, request.routeOptions.url ?? "unmatched")
    principals.set(request, exit.value)
    return undefined
  }
}

/** The whole life of one authenticated API request, as an Effect: validation, handler, envelope. */
const runRoute = <R>(route: ApiRoute<R>, request: FastifyRequest) =>
  Effect.gen(function* () {
    const principal = principals.get(request)
    // Unreachable while the onRequest hook is installed; refuses rather than trusting a missing hook.
    if (principal === undefined) return yield* Effect.fail(ApiError.of("UNAUTHORIZED"))
    const params = yield* decode("params", route.params, request.params ?? {})
    const query = yield* decode("query", route.query, request.query ?? {})
    let body: unknown = undefined
    if (route.body !== undefined) {
      if (request.body !== undefined && !isJson(request)) return yield* Effect.fail(ApiError.of("UNSUPPORTED_MEDIA_TYPE"))
      // No body at all reads as {}; a JSON `null` (or any non-object) is refused by the schema.
      body = yield* decode("body", route.body, request.body === undefined ? {} : request.body)
    }
    return yield* route.handler({ params, query, body, principal })
  })

export const registerApiRoutes = <R>(
  app: FastifyInstance,
  runtime: Runtime.Runtime<R | ApiKeys>,
  routes: ReadonlyArray<ApiRoute<R>>
) => {
  const run = Runtime.runPromiseExit(runtime)
  for (const route of routes) {
    app.route({
      method: route.method,
      url: route.path,
      preParsing: authenticationHook(runtime, route.auth),
      handler: async (request, reply) => {
        const exit = await run(
          runRoute(route, request).pipe(Effect.withSpan(`${route.method} ${route.path}`), Effect.annotateLogs("route", route.path))
        )
        if (Exit.isSuccess(exit)) {
          const status = route.successStatus ?? 200
          return status === 204 ? reply.code(204).send() : reply.code(status).send({ data: exit.value })
        }
        return sendError(reply, await failureToApiError(run, exit.cause, `${route.method} ${route.path}`))
      }
    })
  }
}

const toOpenApiPath = (path: string) => path.replace(/:([A-Za-z0-9_]+)/g, "{$1}")

/** The OpenAPI 3.1 document, generated from the route table's schemas. */
export const openApiDocument = (routes: ReadonlyArray<ApiRoute<any>>, info: { title: string; version: string }) => {
  const definitions: Record<string, any> = {}
  const jsonSchema = (schema: Schema.Schema<any, any>) =>
    JSONSchema.fromAST(schema.ast, {
      definitions,
      definitionPath: "#/components/schemas/",
      target: "openApi3.1"
    })
  const envelope = (schema: Schema.Schema<any, any> | undefined) => ({
    type: "object",
    required: ["data"],
    properties: { data: schema ? jsonSchema(schema) : {} }
  })
  const errorSchema = jsonSchema(ErrorBody)
  const paths: Record<string, Record<string, unknown>> = {}
  for (const route of routes) {
    const path = toOpenApiPath(route.path)
    const parameters: Array<unknown> = []
    const addParameters = (schema: Schema.Schema<any, any> | undefined, location: "path" | "query") => {
      if (!schema) return
      const object = jsonSchema(schema) as { properties?: Record<string, unknown>; required?: Array<string> }
      for (const [name, property] of Object.entries(object.properties ?? {})) {
        parameters.push({ name, in: location, required: location === "path" || (object.required ?? []).includes(name), schema: property })
      }
    }
    addParameters(route.params, "path")
    addParameters(route.query, "query")
    const status = String(route.successStatus ?? 200)
    paths[path] ??= {}
    paths[path]![route.method.toLowerCase()] = {
      summary: route.summary,
      tags: [route.tag],
      security: [{ bearer: [] }],
      parameters,
      ...(route.body ? { requestBody: { required: true, content: { "application/json": { schema: jsonSchema(route.body) } } } } : {}),
      responses: {
        [status]:
          status === "204"
            ? { description: "Done" }
            : { description: "Success", content: { "application/json": { schema: envelope(route.response) } } },
        default: { description: "Error", content: { "application/json": { schema: errorSchema } } }
      }
    }
  }
  return withoutPlaceholderIds({
    openapi: "3.1.0",
    info,
    paths,
    components: {
      schemas: definitions,
      securitySchemes: { bearer: { type: "http", scheme: "bearer" } }
    }
  })
}

/**
 * Effect's JSONSchema marks `Schema.Unknown`, `Schema.Any` and `Schema.Object` with placeholder
 * ids (`"$id": "/schemas/unknown"`); used twice, the same `$id` makes the document invalid
 * OpenAPI 3.1 (JSON Schema 2020-12 ids must be unique). They identify nothing, so they go.
 */
const withoutPlaceholderIds = <A>(value: A): A => {
  if (Array.isArray(value)) return value.map(withoutPlaceholderIds) as A
  if (value === null || typeof value !== "object") return value
  return Object.fromEntries(
    Object.entries(value)
      .filter(([key, inner]) => !(key === "$id" && typeof inner === "string" && inner.startsWith("/schemas/")))
      .map(([key, inner]) => [key, withoutPlaceholderIds(inner)])
  ) as A
}
