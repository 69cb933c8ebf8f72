import { Data, Either } from "effect"
import { describeRefusal, hostRefusal } from "../egress/AddressPolicy.js"
import { isE164, isHttpsUrl, type StoredEnvironment, type UpdateEnvironmentBody } from "./EnvironmentSchema.js"

export interface FieldProblem {
  readonly field: string
  readonly message: string
}

/** A request that is well-formed but breaks a rule spanning several fields. */
export class InvalidEnvironment extends Data.TaggedError("InvalidEnvironment")<{
  readonly details: ReadonlyArray<FieldProblem>
}> {}

export const last4 = (secret: string) => secret.slice(-4)

/** Secrets are sealed bound to their owner and field, so a sealed value moved elsewhere won't open. */
export const associated = (env: { agentId: string; id: string }, field: "webhookSecret" | "errorFallbackWebhookSecret") =>
  `${env.agentId}/${env.id}/${field}`

type Patch = UpdateEnvironmentBody

/** Which destinations this deployment lets customers configure (docs/security.md, "Outbound connections"). */
export interface UrlPolicy {
  readonly agentAllowPrivate: boolean
  readonly webhookAllowPrivate: boolean
}

/**
 * Refusals decidable when a URL is configured: ws:// for agents (unless private networks are
 * allowed, for development), and hosts that are private, loopback, link-local, CGNAT or metadata
 * IP literals or names. Names that resolve there are refused again when the socket connects.
 */
const destinationProblem = (text: string, kind: "agent" | "webhook", policy: UrlPolicy): string | undefined => {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return undefined // the schema already refused it
  }
  const allowPrivate = kind === "agent" ? policy.agentAllowPrivate : policy.webhookAllowPrivate
  if (kind === "agent" && url.protocol === "ws:" && !allowPrivate) {
    return "must be a wss:// URL (ws:// is accepted only with AGENT_ALLOW_PRIVATE_NETWORKS=true)"
  }
  const refusal = hostRefusal(url, allowPrivate)
  return refusal === undefined ? undefined : `must not point to ${describeRefusal(refusal)}`
}

/**
 * Applies a PATCH to an environment: the rules of docs/api.md, "Rules the API enforces". Pure
 * apart from secret generation, whose outputs are returned so the response can show them once.
 */
export const applyPatch = (
  current: StoredEnvironment,
  patch: Patch,
  box: { seal: (plain: string, aad: string) => string; generate: () => string },
  now: string,
  policy: UrlPolicy
): Either.Either<{ next: StoredEnvironment; generated: { webhookSecret?: string } }, InvalidEnvironment> => {
  const problems: Array<FieldProblem> = []
  const next: { -readonly [K in keyof StoredEnvironment]: StoredEnvironment[K] } = { ...current, updatedAt: now }
  const generated: { webhookSecret?: string } = {}

  if (patch.name !== undefined) next.name = patch.name
  if (patch.agentUrl !== undefined) next.agentUrl = patch.agentUrl
  if (patch.maxConcurrentOutboundCalls !== undefined) next.maxConcurrentOutboundCalls = patch.maxConcurrentOutboundCalls
  if (patch.maxConcurrentCalls !== undefined) next.maxConcurrentCalls = patch.maxConcurrentCalls
  if (patch.webhookSignatureScheme !== undefined) next.webhookSignatureScheme = patch.webhookSignatureScheme
  if (patch.agentAudioFormat !== undefined) next.agentAudioFormat = patch.agentAudioFormat
  if (patch.telnyxStreamCodec !== undefined) next.telnyxStreamCodec = patch.telnyxStreamCodec
  if (patch.recording !== undefined) next.recording = patch.recording
  if (patch.errorFallbackShedNewCalls !== undefined) next.errorFallbackShedNewCalls = patch.errorFallbackShedNewCalls
  if (patch.transferFailedMessage !== undefined) next.transferFailedMessage = patch.transferFailedMessage
  const checkDestination = (field: string, value: string | null | undefined, kind: "agent" | "webhook") => {
    const problem = typeof value === "string" ? destinationProblem(value, kind, policy) : undefined
    if (problem !== undefined) problems.push({ field, message: problem })
  }
  checkDestination("agentUrl", patch.agentUrl, "agent")
  checkDestination("webhookUrl", patch.webhookUrl, "webhook")

  // Event webhook. Removing the URL removes the webhook, secret included (docs/api.md, "Rules the API enforces").
  if (patch.webhookUrl === null) {
    next.webhookUrl = null
    next.webhookSecretSealed = null
    next.webhookSecretLast4 = null
  } else if (patch.webhookUrl !== undefined) {
    next.webhookUrl = patch.webhookUrl
  }
  if (patch.webhookSecret === null) {
    next.webhookSecretSealed = null
    next.webhookSecretLast4 = null
  }
  if (patch.webhookUrl !== undefined && patch.webhookUrl !== null && next.webhookSecretSealed === null) {
    const secret = box.generate()
    next.webhookSecretSealed = box.seal(secret, associated(current, "webhookSecret"))
    next.webhookSecretLast4 = last4(secret)
    generated.webhookSecret = secret
  }

  // Error fallback.
  const typeChanged = patch.errorFallbackType !== undefined && patch.errorFallbackType !== current.errorFallbackType
  if (patch.errorFallbackType !== undefined) next.errorFallbackType = patch.errorFallbackType
  if (next.errorFallbackType === "disabled") {
    if (patch.errorFallbackValue !== undefined && patch.errorFallbackValue !== null) {
      problems.push({ field: "errorFallbackValue", message: "can only be set when errorFallbackType is phone or webhook" })
    }
    next.errorFallbackValue = null
  } else {
    if (patch.errorFallbackValue !== undefined) next.errorFallbackValue = patch.errorFallbackValue
    else if (typeChanged) next.errorFallbackValue = current.errorFallbackType === "disabled" ? null : current.errorFallbackValue
    const value = next.errorFallbackValue
    if (value === null) {
      problems.push({ field: "errorFallbackValue", message: `is required when errorFallbackType is ${next.errorFallbackType}` })
    } else if (next.errorFallbackType === "phone" && !isE164(value)) {
      problems.push({ field: "errorFallbackValue", message: "must be a phone number in E.164 format, such as +14155550100" })
    } else if (next.errorFallbackType === "webhook" && !isHttpsUrl(value)) {
      problems.push({ field: "errorFallbackValue", message: "must be an https:// URL without credentials" })
    } else if (next.errorFallbackType === "webhook" && (patch.errorFallbackValue !== undefined || typeChanged)) {
      checkDestination("errorFallbackValue", value, "webhook")
    }
  }
  if (patch.errorFallbackTimeout !== undefined) next.errorFallbackTimeout = patch.errorFallbackTimeout
  if (patch.errorFallbackOccurrenceThreshold !== undefined) {
    next.errorFallbackOccurrenceThreshold = patch.errorFallbackOccurrenceThreshold
  }
  if (patch.errorFallbackTimeWindow !== undefined) next.errorFallbackTimeWindow = patch.errorFallbackTimeWindow
  if (patch.agentFailoverTimeout !== undefined) next.agentFailoverTimeout = patch.agentFailoverTimeout
  if (patch.errorFallbackWebhookSecret === null) next.errorFallbackWebhookSecretSealed = null
  else if (typeChanged && next.errorFallbackType === "webhook" && next.errorFallbackWebhookSecretSealed === null) {
    // Generated when the type becomes webhook; the value is returned on the environment.
    next.errorFallbackWebhookSecretSealed = box.seal(box.generate(), associated(current, "errorFallbackWebhookSecret"))
  }

  return problems.length > 0 ? Either.left(new InvalidEnvironment({ details: problems })) : Either.right({ next, generated })
}

