import { Effect, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { ApiKeyNotFound } from "../../src/apikeys/ApiKeys.js"
import { OutboundNotConfigured, OutboundPlacementFailed, TooManyOutboundCalls } from "../../src/calls/OutboundCallWire.js"
import { InvalidEnvironment } from "../../src/environments/EnvironmentPatch.js"
import { EnvironmentNotFound } from "../../src/environments/Environments.js"
import { ApiError } from "../../src/http/ApiError.js"
import { apiRoute } from "../../src/http/ApiRoute.js"
import { type DomainError, toApiError } from "../../src/http/DomainErrors.js"
import { HardError } from "../../src/kernel/HardError.js"
import { NotReplicated, StoreError } from "../../src/kernel/StoreError.js"
import { RecordingInProgress, RecordingNotFound, RecordingUnavailable } from "../../src/recording/Recordings.js"
import { InvalidSessionCursor, SessionNotFound } from "../../src/sessions/Sessions.js"
import { DeliveryNotFound, DeliveryNotRetryable } from "../../src/webhooks/Deliveries.js"

/** One of every domain error: adding a member to DomainError without adding it here fails to compile. */
const oneOfEach: { readonly [Tag in DomainError["_tag"]]: Extract<DomainError, { readonly _tag: Tag }> } = {
  EnvironmentNotFound: new EnvironmentNotFound({ agentId: "ag", environmentId: "env" }),
  InvalidEnvironment: new InvalidEnvironment({ details: [{ field: "webhookUrl", message: "must be an https URL" }] }),
  StoreError: new StoreError({ operation: "get", cause: new Error("down") }),
  DeliveryNotFound: new DeliveryNotFound({ deliveryId: "d1" }),
  DeliveryNotRetryable: new DeliveryNotRetryable({ deliveryId: "d1", why: "it was delivered" }),
  SessionNotFound: new SessionNotFound({ agentId: "ag", sessionId: "s1" }),
  InvalidSessionCursor: new InvalidSessionCursor(),
  RecordingNotFound: new RecordingNotFound({ agentId: "ag", sessionId: "s1" }),
  RecordingInProgress: new RecordingInProgress({ agentId: "ag", sessionId: "s1" }),
  RecordingUnavailable: new RecordingUnavailable({ message: "bucket down" }),
  ApiKeyNotFound: new ApiKeyNotFound({ keyId: "k1" }),
  TooManyOutboundCalls: new TooManyOutboundCalls({ environmentId: "env", limit: 10 }),
  OutboundNotConfigured: new OutboundNotConfigured({ provider: "twilio", missing: "TWILIO_ACCOUNT_SID" }),
  OutboundPlacementFailed: new OutboundPlacementFailed({ sessionId: "s1", detail: "busy" })
}

describe("typed edges", () => {
  it.each(Object.entries(oneOfEach))("%s has its own HTTP answer, never a 500", (_tag, error) => {
    const answer = toApiError(error)
    expect(answer.status).toBeGreaterThanOrEqual(400)
    expect(answer.status).not.toBe(500)
    expect(answer.message).not.toBe("")
  })

  it("a write no replica confirmed is a 503 that says so, and that it may have taken effect", () => {
    const answer = toApiError(new StoreError({ operation: "environment.insert (replication)", cause: new NotReplicated(1, 0, 500) }))
    expect(answer.status).toBe(503)
    expect(answer.code).toBe("UNAVAILABLE")
    expect(answer.message).toBe(
      "No Redis replica confirmed this change within 500 ms: it reached the primary but a failover could lose it. Check whether it took effect, then retry."
    )
    expect(toApiError(new StoreError({ operation: "get", cause: new Error("down") })).message).toBe("The store is unavailable; retry later.")
  })

  it("an ApiError is answered as it is", () => {
    const error = ApiError.of("CONFLICT", "taken")
    expect(toApiError(error)).toBe(error)
  })

  it("a handler is typed from its schemas, and one that may fail unmapped does not compile", () => {
    const Params = Schema.Struct({ agentId: Schema.String })
    const typed = apiRoute({
      method: "GET",
      path: "/v1/agents/:agentId/typed",
      summary: "typed",
      tag: "test",
      auth: "agent",
      params: Params,
      response: Schema.Struct({ agentId: Schema.String }),
      handler: ({ params }) => Effect.succeed({ agentId: params.agentId })
    })
    const unmapped = apiRoute({
      method: "GET",
      path: "/v1/unmapped",
      summary: "unmapped",
      tag: "test",
      auth: "admin",
      // @ts-expect-error HardError has no HTTP answer in DomainErrors.ts, so this route must not compile
      handler: () => Effect.fail(new HardError({ kind: "agent_error", message: "boom" }))
    })
    const wrongAnswer = apiRoute({
      method: "GET",
      path: "/v1/wrong",
      summary: "wrong",
      tag: "test",
      auth: "admin",
      response: Schema.Struct({ n: Schema.Number }),
      // @ts-expect-error the handler's answer must be what `response` encodes
      handler: () => Effect.succeed({ n: "one" })
    })
    expect([typed.path, unmapped.path, wrongAnswer.path]).toEqual(["/v1/agents/:agentId/typed", "/v1/unmapped", "/v1/wrong"])
  })
})
