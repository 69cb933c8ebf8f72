import { Schema } from "effect"

/** The `session.ended` payload (docs/webhooks.md, "The request"). */
export const SessionEndedEvent = Schema.Struct({
  event: Schema.Literal("session.ended"),
  sessionId: Schema.String,
  agentId: Schema.String,
  environmentId: Schema.String,
  status: Schema.String.annotations({ description: "completed, failed or timeout" }),
  createdAt: Schema.String.annotations({ description: "ISO 8601" }),
  agentPhoneNumber: Schema.optional(Schema.String),
  clientPhoneNumber: Schema.optional(Schema.String),
  duration: Schema.optional(Schema.String.annotations({ description: "Whole seconds, as a string" })),
  direction: Schema.Literal("inbound", "outbound"),
  provider: Schema.optional(Schema.Literal("twilio", "telnyx")),
  callId: Schema.optional(Schema.String),
  endReason: Schema.optional(Schema.String)
}).annotations({ identifier: "SessionEndedEvent" })
export type SessionEndedEvent = typeof SessionEndedEvent.Type
