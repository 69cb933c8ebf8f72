import { Effect, Exit, Option, Runtime } from "effect"
import type { FastifyReply, FastifyRequest } from "fastify"
import { AuthThrottle } from "../apikeys/AuthThrottle.js"
import { ApiKeys, mayActFor, type Principal } from "../apikeys/ApiKeys.js"
import { ApiError } from "./ApiError.js"
import type { ApiRoute } from "./ApiRoute.js"
import { failureToApiError } from "./DomainErrors.js"

const bearer = (request: FastifyRequest): string | undefined => {
  const header = request.headers.authorization
  if (typeof header !== "string") return undefined
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header)
  return match?.[1]
}

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
export const authenticationHook = <R>(runtime: Runtime.Runtime<R | ApiKeys | AuthThrottle>, auth: ApiRoute<unknown>["auth"]) => {
  const run = Runtime.runPromiseExit(runtime)
  const throttle = Runtime.runSync(runtime)(AuthThrottle)
  return async (request: FastifyRequest, reply: FastifyReply): Promise<undefined> => {
    // The key is checked first: a valid one is let in whatever its address's failures; a refused
    // one from an address past AUTH_FAILURES_PER_MINUTE is answered 429 (docs/security.md).
    const exit = await run(authenticateRoute(auth, request))
    if (Exit.isFailure(exit)) {
      const error = await failureToApiError(run, exit.cause, request.routeOptions.url ?? "unmatched")
      if (error.status === 401) {
        const wait = throttle.refused(request.ip)
        if (wait !== undefined) throw tooManyFailures(reply, wait)
      }
      throw error
    }
    principals.set(request, exit.value)
    return undefined
  }
}

/** 429 with Retry-After for an address over AUTH_FAILURES_PER_MINUTE. */
export const tooManyFailures = (reply: FastifyReply, retryAfterSeconds: number) => {
  reply.header("retry-after", String(retryAfterSeconds))
  return ApiError.of("RATE_LIMITED", `Too many failed authentications from this address; retry in ${retryAfterSeconds} seconds.`)
}

/** What the per-key rate limit counts a request against: its API key once authenticated. */
export const rateLimitKeyOf = (request: FastifyRequest): string | undefined => {
  const principal = principals.get(request)
  if (principal === undefined) return undefined
  return principal.kind === "admin" ? "admin" : `key:${principal.keyId}`
}

