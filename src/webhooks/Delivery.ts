import { Schema } from "effect"
import { isoAt } from "../kernel/Time.js"

/**
 * A webhook delivery: one event on its way to one environment's webhook URL, with every attempt
 * made so far. What the outbox stores (times in epoch milliseconds) and what /v1 shows (ISO
 * strings) are both defined here.
 */

export const DeliveryState = Schema.Literal("pending", "delivered", "failed", "exhausted", "cancelled")
export type DeliveryState = typeof DeliveryState.Type

/** What one attempt's result meant for the delivery. */
export const AttemptOutcome = Schema.Literal("delivered", "failed", "retry", "exhausted")
export type AttemptOutcome = typeof AttemptOutcome.Type

export const StoredAttempt = Schema.Struct({
  /** 1 for the first attempt; an attempt cut short by a crash is not recorded. */
  attempt: Schema.Number,
  startedAt: Schema.Number,
  durationMs: Schema.Number,
  statusCode: Schema.NullOr(Schema.Number),
  error: Schema.NullOr(Schema.String),
  outcome: AttemptOutcome
})
export type StoredAttempt = typeof StoredAttempt.Type

export const StoredDelivery = Schema.Struct({
  id: Schema.String,
  event: Schema.Literal("session.ended"),
  agentId: Schema.String,
  environmentId: Schema.String,
  sessionId: Schema.String,
  /** The request body, byte for byte the same on every attempt. */
  body: Schema.String,
  /** The environment's webhook URL when the event was accepted; attempts use the current one. */
  url: Schema.String,
  state: DeliveryState,
  createdAt: Schema.Number,
  updatedAt: Schema.Number,
  /** When the next attempt is due; null once the delivery is settled. */
  nextAttemptAt: Schema.NullOr(Schema.Number),
  /** How many delays of the retry schedule were used; a manual retry gets no automatic retries. */
  retriesUsed: Schema.Number,
  automaticRetries: Schema.Boolean,
  /** Why it settled as failed, exhausted or cancelled. */
  reason: Schema.NullOr(Schema.String),
  attempts: Schema.Array(StoredAttempt)
})
export type StoredDelivery = typeof StoredDelivery.Type

/** Kept per delivery; older attempts are dropped (manual retries could grow it without bound). */
export const MAX_RECORDED_ATTEMPTS = 50

export const hostOf = (url: string): string => {
  try {
    return new URL(url).host
  } catch {
    return "invalid"
  }
}


export const AttemptView = Schema.Struct({
  attempt: Schema.Number,
  attemptedAt: Schema.String.annotations({ description: "ISO 8601" }),
  durationMs: Schema.Number,
  statusCode: Schema.NullOr(Schema.Number).annotations({ description: "The receiver's HTTP status, null when none came" }),
  error: Schema.NullOr(Schema.String).annotations({ description: "Why no usable response came (timeout, connection...)" }),
  outcome: AttemptOutcome
}).annotations({ identifier: "WebhookDeliveryAttempt" })

export const DeliveryView = Schema.Struct({
  id: Schema.String,
  event: Schema.Literal("session.ended"),
  sessionId: Schema.String,
  agentId: Schema.String,
  environmentId: Schema.String,
  state: DeliveryState,
  createdAt: Schema.String,
  updatedAt: Schema.String,
  nextAttemptAt: Schema.NullOr(Schema.String),
  reason: Schema.NullOr(Schema.String),
  payload: Schema.Unknown.annotations({ description: "The event as sent" }),
  attempts: Schema.Array(AttemptView)
}).annotations({ identifier: "WebhookDelivery" })
export type DeliveryView = typeof DeliveryView.Type

export const DeliveryPage = Schema.Struct({
  deliveries: Schema.Array(DeliveryView),
  nextCursor: Schema.NullOr(Schema.String).annotations({ description: "Pass as `cursor` for the next (older) page" })
}).annotations({ identifier: "WebhookDeliveryPage" })

const parsePayload = (body: string): unknown => {
  try {
    return JSON.parse(body)
  } catch {
    return null
  }
}

export const toDeliveryView = (d: StoredDelivery): DeliveryView => ({
  id: d.id,
  event: d.event,
  sessionId: d.sessionId,
  agentId: d.agentId,
  environmentId: d.environmentId,
  state: d.state,
  createdAt: isoAt(d.createdAt),
  updatedAt: isoAt(d.updatedAt),
  nextAttemptAt: d.nextAttemptAt === null ? null : isoAt(d.nextAttemptAt),
  reason: d.reason,
  payload: parsePayload(d.body),
  attempts: d.attempts.map((a) => ({
    attempt: a.attempt,
    attemptedAt: isoAt(a.startedAt),
    durationMs: a.durationMs,
    statusCode: a.statusCode,
    error: a.error,
    outcome: a.outcome
  }))
})
