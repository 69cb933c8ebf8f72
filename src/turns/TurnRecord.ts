import { Schema } from "effect"

/** One caller turn as the session routes show it (`turns` on a session). */
export const TurnRecord = Schema.Struct({
  /** 1-based, in order of the call. */
  index: Schema.Number,
  input: Schema.Literal("speech", "dtmf").annotations({ description: "What ended the caller's input: speech, or a DTMF digit" }),
  callerEndedAt: Schema.String.annotations({ description: "ISO 8601: the caller's last voiced frame (or digit); the response timer starts here" }),
  agentRespondedAt: Schema.NullOr(Schema.String).annotations({
    description: "ISO 8601: the agent's first voiced frame after the turn; null when it did not answer (the caller spoke again, or the call ended)"
  }),
  latencyMs: Schema.NullOr(Schema.Number).annotations({ description: "agentRespondedAt - callerEndedAt, in milliseconds" }),
  playedLatencyMs: Schema.optional(Schema.NullOr(Schema.Number)).annotations({
    description:
      "From callerEndedAt to the moment the caller heard the answer begin, as the carrier confirmed by echoing callgate's mark; null until confirmed, and for an answer the agent cleared first (absent on turns recorded before this field existed)"
  }),
  timeoutOccurrences: Schema.Number.annotations({
    description: "How many times the response timer expired during this turn (each recorded a no-response occurrence)"
  })
}).annotations({ identifier: "Turn" })
export type TurnRecord = typeof TurnRecord.Type
