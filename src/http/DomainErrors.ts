import { Cause, Effect, Option } from "effect"
import type { FastifyReply } from "fastify"
import { ApiError } from "./ApiError.js"

/**
 * Maps the domain's failures to HTTP, in one table (docs/design.md, "Layers": no route module
 * changes shared state on import). Domain modules know nothing of HTTP; a new domain error's tag
 * is added here.
 */
const domainErrors: Readonly<Record<string, (error: any) => ApiError>> = {
  EnvironmentNotFound: (e) => ApiError.of("NOT_FOUND", `Environment ${e.environmentId} of agent ${e.agentId} was not found.`),
  InvalidEnvironment: (e) => ApiError.of("VALIDATION_FAILED", `${e.details[0].field} ${e.details[0].message}`, e.details),
  StoreError: () => ApiError.of("UNAVAILABLE", "The store is unavailable; retry later."),
  NotFound: (e) => ApiError.of("NOT_FOUND", e.message),
  Conflict: (e) => ApiError.of("CONFLICT", e.message),
  DeliveryNotFound: (e) => ApiError.of("NOT_FOUND", `Webhook delivery ${e.deliveryId} was not found.`),
  DeliveryNotRetryable: (e) => ApiError.of("CONFLICT", `Webhook delivery ${e.deliveryId} cannot be retried: ${e.why}.`),
  SessionNotFound: (e) => ApiError.of("NOT_FOUND", `Session ${e.sessionId} of agent ${e.agentId} was not found.`),
  InvalidSessionCursor: () =>
    ApiError.of("VALIDATION_FAILED", "cursor is not a cursor returned by this endpoint", [
      { field: "cursor", message: "is not a cursor returned by this endpoint" }
    ]),
  RecordingNotFound: (e) => ApiError.of("NOT_FOUND", `Session ${e.sessionId} of agent ${e.agentId} has no recording.`),
  RecordingInProgress: (e) => ApiError.of("CONFLICT", `Session ${e.sessionId} is still being recorded; retry when the call has ended.`),
  RecordingUnavailable: () => ApiError.of("UNAVAILABLE", "The recordings bucket is unavailable; retry later."),
  ApiKeyNotFound: (e) => ApiError.of("NOT_FOUND", `API key ${e.keyId} was not found.`),
  TooManyOutboundCalls: (e) =>
    ApiError.of(
      "RATE_LIMITED",
      `Environment ${e.environmentId} already has ${e.limit} outbound calls placed or live (maxConcurrentOutboundCalls); retry when one ends.`
    ),
  OutboundNotConfigured: (e) =>
    ApiError.of("VALIDATION_FAILED", `provider ${e.provider} cannot place calls: ${e.missing} not set`, [
      { field: "provider", message: `cannot place calls: ${e.missing} not set` }
    ]),
  OutboundPlacementFailed: (e) =>
    ApiError.of("CARRIER_ERROR", `The carrier refused the call (session ${e.sessionId} ended failed, carrier_failed): ${e.detail}`)
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

