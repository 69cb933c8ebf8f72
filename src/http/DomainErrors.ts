import { Cause, Effect, Option } from "effect"
import type { FastifyReply } from "fastify"
import type { ApiKeyNotFound } from "../apikeys/ApiKeys.js"
import type { OutboundNotConfigured, OutboundPlacementFailed, TooManyOutboundCalls } from "../calls/OutboundCallWire.js"
import type { InvalidEnvironment } from "../environments/EnvironmentPatch.js"
import type { EnvironmentNotFound } from "../environments/Environments.js"
import type { StoreError } from "../kernel/StoreError.js"
import type { RecordingInProgress, RecordingNotFound, RecordingUnavailable } from "../recording/Recordings.js"
import type { InvalidSessionCursor, SessionNotFound } from "../sessions/Sessions.js"
import type { DeliveryNotFound, DeliveryNotRetryable } from "../webhooks/Deliveries.js"
import { ApiError } from "./ApiError.js"

/**
 * Every failure a route handler may return: the domain's errors that have an HTTP answer, and
 * ApiError itself. A handler whose error type holds anything else does not compile (ApiRoute.ts),
 * so no domain failure reaches the edge unmapped.
 */
export type DomainError =
  | EnvironmentNotFound
  | InvalidEnvironment
  | StoreError
  | DeliveryNotFound
  | DeliveryNotRetryable
  | SessionNotFound
  | InvalidSessionCursor
  | RecordingNotFound
  | RecordingInProgress
  | RecordingUnavailable
  | ApiKeyNotFound
  | TooManyOutboundCalls
  | OutboundNotConfigured
  | OutboundPlacementFailed

export type RouteError = DomainError | ApiError

/**
 * The HTTP answer of each domain error, by its tag. The table's type lists every member of
 * `DomainError` exactly once: a missing entry, or one that matches no error, is a compile error.
 */
const domainErrors: { readonly [Tag in DomainError["_tag"]]: (error: Extract<DomainError, { readonly _tag: Tag }>) => ApiError } = {
  EnvironmentNotFound: (e) => ApiError.of("NOT_FOUND", `Environment ${e.environmentId} of agent ${e.agentId} was not found.`),
  InvalidEnvironment: (e) => {
    const first = e.details[0]
    return ApiError.of("VALIDATION_FAILED", first ? `${first.field} ${first.message}` : undefined, e.details)
  },
  StoreError: (e) => {
    const unconfirmed = e.notReplicated
    // The primary took it, so a blind retry of a create makes a second one: say so.
    return unconfirmed === undefined
      ? ApiError.of("UNAVAILABLE", "The store is unavailable; retry later.")
      : ApiError.of(
          "UNAVAILABLE",
          `No Redis replica confirmed this change within ${unconfirmed.timeoutMs} ms: it reached the primary but a failover could lose it. Check whether it took effect, then retry.`
        )
  },
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
      e.setting === "maxConcurrentCalls"
        ? `Environment ${e.environmentId} already has ${e.limit} calls live across the fleet (maxConcurrentCalls); retry when one ends.`
        : `Environment ${e.environmentId} already has ${e.limit} outbound calls placed or live (maxConcurrentOutboundCalls); retry when one ends.`
    ),
  OutboundNotConfigured: (e) =>
    ApiError.of("VALIDATION_FAILED", `provider ${e.provider} cannot place calls: ${e.missing} not set`, [
      { field: "provider", message: `cannot place calls: ${e.missing} not set` }
    ]),
  OutboundPlacementFailed: (e) =>
    ApiError.of("CARRIER_ERROR", `The carrier refused the call (session ${e.sessionId} ended failed, carrier_failed): ${e.detail}`)
}

/** The HTTP answer of a route's failure. */
export const toApiError = (error: RouteError): ApiError => {
  if (error._tag === "ApiError") return error
  const map = domainErrors[error._tag] as (error: DomainError) => ApiError
  return map(error)
}

export const sendError = (reply: FastifyReply, error: ApiError) => reply.code(error.status).send(error.toBody())

/** A route's failure becomes its ApiError; a defect or an interruption is logged and becomes a 500 that carries none of its details. */
export const failureToApiError = async (run: (effect: Effect.Effect<void>) => Promise<unknown>, cause: Cause.Cause<RouteError>, where: string) => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) return toApiError(failure.value)
  await run(Effect.logError("request failed", { route: where }, cause))
  return ApiError.of("INTERNAL")
}
