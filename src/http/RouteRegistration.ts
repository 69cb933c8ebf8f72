import { Effect, Exit, Runtime, Schema } from "effect"
import type { FastifyInstance, FastifyRequest } from "fastify"
import type { ApiKeys } from "../apikeys/ApiKeys.js"
import type { AuthThrottle } from "../apikeys/AuthThrottle.js"
import { ApiError, fromParseError } from "./ApiError.js"
import { authenticationHook, principalOf } from "./ApiAuth.js"
import type { ApiRoute, RawResponse } from "./ApiRoute.js"
import { failureToApiError, sendError } from "./DomainErrors.js"

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

/** The whole life of one authenticated API request, as an Effect: validation, handler, envelope. */
const runRoute = <R>(route: ApiRoute<R>, request: FastifyRequest) =>
  Effect.gen(function* () {
    const principal = principalOf(request)
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
    return yield* route.handler({ params, query, body, principal, headers: request.headers })
  })

export const registerApiRoutes = <R>(
  app: FastifyInstance,
  runtime: Runtime.Runtime<R | ApiKeys | AuthThrottle>,
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
        if (Exit.isSuccess(exit) && route.produces !== undefined) {
          const raw = exit.value as RawResponse
          reply.code(raw.status).headers(raw.headers)
          return raw.body === undefined ? reply.send() : reply.send(raw.body)
        }
        if (Exit.isSuccess(exit)) {
          const status = route.successStatus ?? 200
          return status === 204 ? reply.code(204).send() : reply.code(status).send({ data: exit.value })
        }
        return sendError(reply, await failureToApiError(run, exit.cause, `${route.method} ${route.path}`))
      }
    })
  }
}

