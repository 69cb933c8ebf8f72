import { Schema } from "effect"
import { TELNYX_STREAM_CODECS } from "../kernel/TelnyxStreamCodec.js"

/**
 * Wire formats of environments: what the store keeps, what /v1 returns, and what /v1 accepts.
 * The same schemas validate requests and produce the OpenAPI document.
 */

/** Agent and environment ids go into Redis hash tags, so braces and colons are never allowed. */
export const ResourceId = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9_-]{1,64}$/, { message: () => "must be 1 to 64 letters, digits, '_' or '-'" }),
  Schema.annotations({ identifier: "ResourceId" })
)

const isUrlWithScheme = (text: string, schemes: ReadonlyArray<string>): boolean => {
  try {
    const url = new URL(text)
    return schemes.includes(url.protocol) && url.hostname.length > 0 && url.username === "" && url.password === ""
  } catch {
    return false
  }
}

export const HttpsUrl = Schema.String.pipe(
  Schema.maxLength(2048),
  Schema.filter((text) => isUrlWithScheme(text, ["https:"]) || "must be an https:// URL without credentials", {
    jsonSchema: { format: "uri", pattern: "^https://" }
  }),
  Schema.annotations({ identifier: "HttpsUrl" })
)

export const WssUrl = Schema.String.pipe(
  Schema.maxLength(2048),
  Schema.filter((text) => isUrlWithScheme(text, ["wss:", "ws:"]) || "must be a wss:// (or, on your own network, ws://) URL", {
    jsonSchema: { format: "uri", pattern: "^wss?://" }
  }),
  Schema.annotations({ identifier: "WssUrl" })
)

export const E164 = Schema.String.pipe(
  Schema.pattern(/^\+[1-9]\d{1,14}$/, { message: () => "must be a phone number in E.164 format, such as +14155550100" }),
  Schema.annotations({ identifier: "E164" })
)

export const FallbackType = Schema.Literal("disabled", "phone", "webhook").annotations({
  // override: a union's own message is otherwise replaced by one line per member.
  message: () => ({ message: "must be one of disabled, phone, webhook", override: true })
})
export type FallbackType = typeof FallbackType.Type

const intBetween = (min: number, max: number) =>
  Schema.Number.annotations({ message: () => `must be an integer from ${min} to ${max}` }).pipe(
    Schema.int({ message: () => "must be an integer" }),
    Schema.between(min, max, { message: () => `must be an integer from ${min} to ${max}` })
  )

export const FallbackTimeout = intBetween(0, 30)
export const FallbackThreshold = intBetween(1, 20)
export const FallbackWindow = intBetween(60, 3600)
/** The environment's agentFailoverTimeout, seconds (docs/reliability.md, "Agent failover"). */
export const AgentFailoverTimeout = intBetween(0, 30)
/** agentFailoverTimeout when an environment does not set it. */
export const DEFAULT_AGENT_FAILOVER_TIMEOUT = 5

/**
 * How event webhooks are signed (docs/webhooks.md, "Signature schemes"): `service`, the interface's
 * `X-Service-Signature` / `X-Service-Timestamp`; `standard`, Standard Webhooks' `webhook-id`,
 * `webhook-timestamp`, `webhook-signature: v1,<base64>`; `both`, every header. The error fallback
 * webhook always uses `service`.
 */
export const WebhookSignatureScheme = Schema.Literal("service", "standard", "both").annotations({
  message: () => ({ message: "must be one of service, standard, both", override: true })
})
export type WebhookSignatureScheme = typeof WebhookSignatureScheme.Type
export const DEFAULT_WEBHOOK_SIGNATURE_SCHEME: WebhookSignatureScheme = "service"

/**
 * The audio the environment's agents speak (docs/calls.md, "Audio formats"): `carrier`, the
 * stream's own format (default); or 8 kHz mu-law, transcoded both ways, for bots that speak only that.
 */
export const AgentAudioFormat = Schema.Literal("carrier", "audio/x-mulaw;rate=8000").annotations({
  message: () => ({ message: "must be one of carrier, audio/x-mulaw;rate=8000", override: true })
})
export type AgentAudioFormat = typeof AgentAudioFormat.Type

/**
 * The codec callgate asks Telnyx to stream the environment's calls in, both ways (docs/calls.md,
 * "Audio formats"; kernel/TelnyxStreamCodec.ts). Twilio calls are 8 kHz mu-law whatever it says.
 */
export const TelnyxStreamCodecField = Schema.Literal(...TELNYX_STREAM_CODECS).annotations({
  message: () => ({ message: `must be one of ${TELNYX_STREAM_CODECS.join(", ")}`, override: true })
})

export const FALLBACK_DEFAULTS = { timeout: 0, threshold: 5, window: 300 } as const

/** Outbound calls of an environment placed or live at once (docs/calls.md, "Placing outbound calls"). */
export const MaxConcurrentOutboundCalls = intBetween(1, 1000)
export const DEFAULT_MAX_CONCURRENT_OUTBOUND_CALLS = 10

/** Calls of an environment, inbound and outbound, live at once across the fleet (docs/scaling.md, "Fleet-wide call limits"). */
export const MaxConcurrentCalls = intBetween(1, 100_000)

/** Whether the environment's calls are recorded (docs/recording.md). */
export const RecordingMode = Schema.Literal("off", "on").annotations({
  message: () => ({ message: "must be one of off, on", override: true })
})
export type RecordingMode = typeof RecordingMode.Type

/**
 * An environment as stored. Secrets are sealed (see SecretBox); `version` increases with every
 * write so stores can refuse a write based on a stale read.
 */
export const StoredEnvironment = Schema.Struct({
  id: ResourceId,
  agentId: ResourceId,
  name: Schema.String,
  createdAt: Schema.String,
  updatedAt: Schema.String,
  version: Schema.Number,
  webhookUrl: Schema.NullOr(Schema.String),
  webhookSecretSealed: Schema.NullOr(Schema.String),
  webhookSecretLast4: Schema.NullOr(Schema.String),
  errorFallbackType: FallbackType,
  errorFallbackValue: Schema.NullOr(Schema.String),
  errorFallbackTimeout: Schema.Number,
  errorFallbackOccurrenceThreshold: Schema.Number,
  errorFallbackTimeWindow: Schema.Number,
  errorFallbackWebhookSecretSealed: Schema.NullOr(Schema.String),
  agentUrl: Schema.NullOr(Schema.String),
  /** Absent on environments stored before outbound calls existed: the default applies. */
  maxConcurrentOutboundCalls: Schema.optional(Schema.Number),
  /** Absent on environments stored before the limit existed: no limit. */
  maxConcurrentCalls: Schema.optional(Schema.NullOr(Schema.Number)),
  /** Absent on environments stored before the field existed: `service`. */
  webhookSignatureScheme: Schema.optional(WebhookSignatureScheme),
  /** Absent on environments stored before the field existed: `carrier`. */
  agentAudioFormat: Schema.optional(AgentAudioFormat),
  /** Absent on environments stored before the field existed: PCMU. */
  telnyxStreamCodec: Schema.optional(TelnyxStreamCodecField),
  /** Absent on environments stored before recording existed: off. */
  recording: Schema.optional(RecordingMode),
  /** Absent on environments stored before shedding existed: true. */
  errorFallbackShedNewCalls: Schema.optional(Schema.Boolean),
  /** Absent on environments stored before transfer outcomes existed: none. */
  transferFailedMessage: Schema.optional(Schema.NullOr(Schema.String)),
  /** Absent on environments stored before agent failover existed: the default (5 s) applies. */
  agentFailoverTimeout: Schema.optional(Schema.Number)
})
export type StoredEnvironment = typeof StoredEnvironment.Type

/** An environment as /v1 returns it. `webhookSecret` appears only in the response that generated it. */
export const EnvironmentView = Schema.Struct({
  id: Schema.String,
  agentId: Schema.String,
  name: Schema.String,
  createdAt: Schema.String,
  updatedAt: Schema.String,
  webhookUrl: Schema.NullOr(Schema.String),
  webhookSecret: Schema.optional(Schema.String).annotations({
    description: "Present only in the response that generated the secret"
  }),
  webhookSecretLast4: Schema.NullOr(Schema.String),
  webhookSignatureScheme: WebhookSignatureScheme.annotations({
    description: "How event webhooks are signed: service (X-Service-Signature, default), standard (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature v1) or both"
  }),
  agentAudioFormat: AgentAudioFormat.annotations({
    description: "The audio the agents receive and send: carrier (the stream's own format, default) or audio/x-mulaw;rate=8000 (transcoded both ways)"
  }),
  telnyxStreamCodec: TelnyxStreamCodecField.annotations({
    description:
      "The codec callgate asks Telnyx to stream calls in, both ways (Call Control stream_codec / stream_bidirectional_codec / stream_bidirectional_sampling_rate, TeXML <Stream> codec / bidirectionalCodec / bidirectionalSamplingRate): PCMU (default), PCMA, L16;rate=8000, L16;rate=16000 or G722. Twilio calls are always 8 kHz mu-law"
  }),
  errorFallbackType: FallbackType,
  errorFallbackValue: Schema.NullOr(Schema.String),
  errorFallbackTimeout: Schema.Number,
  errorFallbackOccurrenceThreshold: Schema.Number,
  errorFallbackTimeWindow: Schema.Number,
  errorFallbackWebhookSecret: Schema.NullOr(Schema.String),
  errorFallbackShedNewCalls: Schema.Boolean.annotations({
    description:
      "While the environment's breaker is open, new calls get the error fallback in the entry answer itself, except one probe call per BREAKER_PROBE_INTERVAL (docs/fallback.md, \"Shedding\"); default true, false sends every call to an agent"
  }),
  transferFailedMessage: Schema.NullOr(Schema.String).annotations({
    description:
      "Spoken (<Say>) to a caller whose phone-fallback transfer was busy, not answered or failed, before the hang-up (docs/fallback.md, \"Transfer outcomes\"); null, the default: the call is hung up at once"
  }),
  agentUrl: Schema.NullOr(Schema.String),
  agentFailoverTimeout: Schema.Number.annotations({
    description:
      "Seconds (0 to 30, default 5) a call whose agent leg ended abnormally waits for another agent of the environment before the error fallback runs (docs/reliability.md, \"Agent failover\"); 0: the fallback runs at once"
  }),
  maxConcurrentOutboundCalls: Schema.Number.annotations({
    description: "Outbound calls placed or live at once across the fleet (1 to 1000, default 10); beyond it, placing a call answers 429"
  }),
  maxConcurrentCalls: Schema.NullOr(Schema.Number).annotations({
    description:
      "Calls, inbound and outbound together, live at once across the fleet (1 to 100000; null, the default: no limit). Beyond it, placing a call answers 429 and an inbound call gets the error fallback (endReason concurrency_limit)"
  }),
  recording: RecordingMode.annotations({
    description: "on: every call of the environment is recorded as a two-channel WAV (docs/recording.md); default off"
  })
}).annotations({ identifier: "Environment" })
export type EnvironmentView = typeof EnvironmentView.Type

/** What a caller hears when a phone-fallback transfer fails: plain text for `<Say>`. */
const TransferFailedMessage = Schema.String.pipe(
  Schema.minLength(1, { message: () => "must be 1 to 1000 characters, or null" }),
  Schema.maxLength(1000, { message: () => "must be 1 to 1000 characters, or null" })
)

const patchFields = {
  name: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200))),
  webhookUrl: Schema.optional(Schema.NullOr(HttpsUrl)),
  webhookSecret: Schema.optional(
    Schema.Null.annotations({
      description: "Only null is accepted: clears the secret. Use regenerate-webhook-secret for a new one.",
      message: () => "only null is accepted (it clears the secret); use regenerate-webhook-secret for a new one"
    })
  ),
  webhookSignatureScheme: Schema.optional(WebhookSignatureScheme),
  agentAudioFormat: Schema.optional(AgentAudioFormat),
  telnyxStreamCodec: Schema.optional(TelnyxStreamCodecField),
  errorFallbackType: Schema.optional(FallbackType),
  errorFallbackValue: Schema.optional(Schema.NullOr(Schema.String.pipe(Schema.maxLength(2048)))),
  errorFallbackTimeout: Schema.optional(FallbackTimeout),
  errorFallbackOccurrenceThreshold: Schema.optional(FallbackThreshold),
  errorFallbackTimeWindow: Schema.optional(FallbackWindow),
  errorFallbackShedNewCalls: Schema.optional(Schema.Boolean),
  transferFailedMessage: Schema.optional(Schema.NullOr(TransferFailedMessage)),
  errorFallbackWebhookSecret: Schema.optional(
    Schema.Null.annotations({
      description: "Only null is accepted: clears the secret, so fallback requests go unsigned.",
      message: () => "only null is accepted (it clears the secret); use regenerate-error-fallback-webhook-secret for a new one"
    })
  ),
  agentUrl: Schema.optional(Schema.NullOr(WssUrl)),
  agentFailoverTimeout: Schema.optional(AgentFailoverTimeout),
  maxConcurrentOutboundCalls: Schema.optional(MaxConcurrentOutboundCalls),
  maxConcurrentCalls: Schema.optional(Schema.NullOr(MaxConcurrentCalls)),
  recording: Schema.optional(RecordingMode)
}

/** The message a body that is not an object gets (nested fields keep their own messages). */
const objectBody = { message: () => "must be a JSON object" }

export const UpdateEnvironmentBody = Schema.Struct(patchFields).annotations({ identifier: "UpdateEnvironment", ...objectBody })
export type UpdateEnvironmentBody = typeof UpdateEnvironmentBody.Type

export const CreateEnvironmentBody = Schema.Struct({
  ...patchFields,
  name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200))
}).annotations({ identifier: "CreateEnvironment", ...objectBody })
export type CreateEnvironmentBody = typeof CreateEnvironmentBody.Type

export const CloneEnvironmentBody = Schema.Struct({
  name: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)))
}).annotations({ identifier: "CloneEnvironment", ...objectBody })

export const EnvironmentParams = Schema.Struct({ agentId: ResourceId, environmentId: ResourceId })
export const AgentParams = Schema.Struct({ agentId: ResourceId })

export const isE164 = Schema.is(E164)
export const isHttpsUrl = Schema.is(HttpsUrl)
