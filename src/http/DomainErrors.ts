import { Cause, Effect, Option } from "effect"
import type { FastifyReply } from "fastify"
import { ApiError } from "./ApiError.js"

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

export const sendError = (reply: FastifyReply, error: ApiError) => reply.code(error.status).send(error.toBody())

/** Known failures become their ApiError; anything else is logged and becomes a 500 that carries none of its details. */
export const failureToApiError = async (run: (effect: Effect.Effect<void>) => Promise<unknown>, cause: Cause.Cause<unknown>, where: string) => {
  const failure = Cause.failureOption(cause).pipe(Option.flatMap(toApiError))
  if (Option.isSome(failure)) return failure.value
  await run(Effect.logError("request failed", { route: where }, cause))
  return ApiError.of("INTERNAL")
}

