/**
 * The dashboard's only way to the server: /v1 with the signed-in key as a bearer token. The key
 * lives in this tab's sessionStorage and nowhere else: never in a URL, never logged.
 */
const STORAGE_KEY = "callgate.apiKey"

export const session = {
  key: (): string | null => sessionStorage.getItem(STORAGE_KEY),
  signIn: (key: string) => sessionStorage.setItem(STORAGE_KEY, key),
  signOut: () => sessionStorage.removeItem(STORAGE_KEY)
}

export interface FieldError {
  readonly field: string
  readonly message: string
}

/** A /v1 error answer (the envelope `{"error": {code, message, details}}`), or a network failure (status 0). */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: ReadonlyArray<FieldError> = []
  ) {
    super(message)
  }
}

/** Called when the server says the key is not (or no longer) valid. */
let onUnauthorized: () => void = () => {}
export const setUnauthorizedHandler = (handler: () => void) => {
  onUnauthorized = handler
}

export const request = async <T>(method: "GET" | "POST" | "PATCH" | "DELETE", path: string, body?: unknown, key = session.key()): Promise<T> => {
  const headers: Record<string, string> = { accept: "application/json" }
  if (key !== null) headers.authorization = `Bearer ${key}`
  if (body !== undefined) headers["content-type"] = "application/json"
  let response: Response
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer"
    })
  } catch {
    throw new ApiFailure(0, "NETWORK", "callgate could not be reached.")
  }
  if (response.status === 204) return undefined as T
  const json = (await response.json().catch(() => null)) as
    | { data?: T; error?: { code?: string; message?: string; details?: Array<FieldError> } }
    | null
  if (!response.ok) {
    const error = json?.error
    const failure = new ApiFailure(response.status, error?.code ?? "HTTP", error?.message ?? `HTTP ${response.status}`, error?.details ?? [])
    if (response.status === 401 && key === session.key()) onUnauthorized()
    throw failure
  }
  return json?.data as T
}

export const enc = encodeURIComponent

/**
 * A call's recording as a Blob: the API key goes in the Authorization header, which an <audio>
 * element cannot send, so the page fetches the WAV and plays it from memory.
 */
export const fetchRecording = async (agentId: string, sessionId: string, key = session.key()): Promise<Blob> => {
  const response = await fetch(`/v1/agents/${enc(agentId)}/sessions/${enc(sessionId)}/recording`, {
    headers: key !== null ? { authorization: `Bearer ${key}` } : {},
    cache: "no-store",
    credentials: "omit",
    referrerPolicy: "no-referrer"
  }).catch(() => {
    throw new ApiFailure(0, "NETWORK", "callgate could not be reached.")
  })
  if (!response.ok) {
    const json = (await response.json().catch(() => null)) as { error?: { code?: string; message?: string } } | null
    throw new ApiFailure(response.status, json?.error?.code ?? "HTTP", json?.error?.message ?? `HTTP ${response.status}`)
  }
  return response.blob()
}

// ---- The wire shapes the dashboard reads (see docs/api.md) ----

export type FallbackType = "disabled" | "phone" | "webhook"
export type WebhookSignatureScheme = "service" | "standard" | "both"
/** The codec callgate asks Telnyx to stream in (docs/calls.md, "Audio formats"). */
export type TelnyxStreamCodec = "PCMU" | "PCMA" | "L16;rate=8000" | "L16;rate=16000" | "G722"
/** The audio the environment's agents speak: the stream's own, or 8 kHz mu-law transcoded both ways. */
export type AgentAudioFormat = "carrier" | "audio/x-mulaw;rate=8000"

export interface Environment {
  readonly id: string
  readonly agentId: string
  readonly name: string
  readonly createdAt: string
  readonly updatedAt: string
  readonly webhookUrl: string | null
  readonly webhookSecret?: string
  readonly webhookSecretLast4: string | null
  readonly webhookSignatureScheme: WebhookSignatureScheme
  readonly agentAudioFormat: AgentAudioFormat
  /** Twilio calls are 8 kHz mu-law whatever it says. */
  readonly telnyxStreamCodec: TelnyxStreamCodec
  readonly errorFallbackType: FallbackType
  readonly errorFallbackValue: string | null
  readonly errorFallbackTimeout: number
  readonly errorFallbackOccurrenceThreshold: number
  readonly errorFallbackTimeWindow: number
  readonly errorFallbackShedNewCalls: boolean
  /** Spoken when a phone-fallback transfer fails, before the hang-up; null: none. */
  readonly transferFailedMessage: string | null
  readonly errorFallbackWebhookSecret: string | null
  /** Seconds (0 to 30, default 5) a call whose agent leg ended abnormally waits for another agent before the error fallback runs. */
  readonly agentFailoverTimeout: number
  readonly agentUrl: string | null
  readonly maxConcurrentOutboundCalls: number
  /** Calls live at once across the fleet, inbound and outbound; null: no limit. */
  readonly maxConcurrentCalls: number | null
  /** Every call of the environment recorded (docs/recording.md). */
  readonly recording: "off" | "on"
}

export interface AgentList {
  readonly agents: ReadonlyArray<{ readonly agentId: string; readonly environments: number }>
  readonly scope: { readonly kind: "admin" } | { readonly kind: "scoped"; readonly agentIds: ReadonlyArray<string> }
}

export interface Turn {
  readonly index: number
  readonly input: "speech" | "dtmf"
  readonly callerEndedAt: string
  readonly agentRespondedAt: string | null
  readonly latencyMs: number | null
  /** When the caller heard the answer begin (the carrier echoed callgate's mark); null when not confirmed. */
  readonly playedLatencyMs?: number | null
  readonly timeoutOccurrences: number
}

export interface FallbackRecord {
  readonly trigger: string
  readonly errorMessage: string
  readonly type: FallbackType
  readonly outcome: string
  readonly startedAt: string
  readonly carrierRequestAt: string | null
  readonly finishedAt: string
  readonly webhookStatus: number | null
  readonly detail: string | null
}

export interface TransferRecord {
  readonly to: string
  readonly initiatedBy: "agent" | "fallback"
  readonly status: "answered" | "busy" | "no-answer" | "failed" | "canceled"
  readonly ringMs: number
  readonly talkMs: number
  readonly startedAt: string
  readonly endedAt: string
  readonly carrierStatus: string | null
  readonly transferFailedMessage: boolean
}

/** One agent leg of a session (docs/reliability.md, "Agent failover"). */
export interface AgentLeg {
  readonly startedAt: string
  readonly endedAt: string | null
  readonly endReason: string | null
  readonly instanceId: string
}

/** queued and ringing: an outbound call placed and not answered yet (docs/calls.md, "Placing outbound calls"). */
export type SessionStatus = "queued" | "ringing" | "active" | "completed" | "failed" | "timeout"

export interface Session {
  readonly id: string
  readonly agentId: string
  readonly environmentId: string
  readonly provider: "twilio" | "telnyx"
  readonly callId: string
  readonly from: string | null
  readonly to: string | null
  readonly direction: "inbound" | "outbound"
  readonly createdAt: string
  readonly endedAt: string | null
  readonly status: SessionStatus
  readonly endReason: string | null
  readonly turns: ReadonlyArray<Turn>
  readonly fallback: FallbackRecord | null
  /** The call's transfers with their outcomes (docs/fallback.md, "Transfer outcomes"). */
  readonly transfers?: ReadonlyArray<TransferRecord>
  /** A transfer ringing or talking whose outcome has not come yet. */
  readonly pendingTransfer?: { readonly to: string; readonly initiatedBy: "agent" | "fallback"; readonly startedAt: string; readonly answeredAt: string | null }
  /** The agents that held the call, in order (more than one after a failover); absent before an agent was connected. */
  readonly agentLegs?: ReadonlyArray<AgentLeg>
  /** How many times the call moved to another agent. */
  readonly agentFailovers?: number
  /** Present once the call's recording is complete. */
  readonly recording?: { readonly url: string; readonly durationMs: number; readonly pauses: ReadonlyArray<{ readonly startMs: number; readonly endMs: number }> }
}

export interface SessionPage {
  readonly sessions: ReadonlyArray<Session>
  readonly nextCursor: string | null
}

export interface DeliveryAttempt {
  readonly attempt: number
  readonly attemptedAt: string
  readonly durationMs: number
  readonly statusCode: number | null
  readonly error: string | null
  readonly outcome: string
}

export interface Delivery {
  readonly id: string
  readonly sessionId: string
  readonly environmentId: string
  readonly state: "pending" | "delivered" | "failed" | "exhausted" | "cancelled"
  readonly createdAt: string
  readonly updatedAt: string
  readonly nextAttemptAt: string | null
  readonly reason: string | null
  readonly attempts: ReadonlyArray<DeliveryAttempt>
}

export interface DeliveryPage {
  readonly deliveries: ReadonlyArray<Delivery>
  readonly nextCursor: string | null
}

export interface BreakerState {
  readonly state: "closed" | "open" | "probing"
  readonly shedNewCalls: boolean
  readonly noResponseTrigger: "on" | "off"
  readonly timeoutSeconds: number
  readonly threshold: number
  readonly windowSeconds: number
  readonly occurrences: number
  readonly newestOccurrenceAt: string | null
  readonly lastTrip: { readonly at: string; readonly sessionId: string; readonly count: number; readonly threshold: number } | null
}

const agentPath = (agentId: string) => `/v1/agents/${enc(agentId)}`
const envPath = (agentId: string, environmentId: string) => `${agentPath(agentId)}/environments/${enc(environmentId)}`

export const api = {
  agents: (key?: string) => request<AgentList>("GET", "/v1/agents", undefined, key ?? session.key()),
  environments: (agentId: string) => request<ReadonlyArray<Environment>>("GET", `${agentPath(agentId)}/environments`),
  environment: (agentId: string, environmentId: string) => request<Environment>("GET", envPath(agentId, environmentId)),
  createEnvironment: (agentId: string, name: string) => request<Environment>("POST", `${agentPath(agentId)}/environments`, { name }),
  cloneEnvironment: (agentId: string, environmentId: string) => request<Environment>("POST", `${envPath(agentId, environmentId)}/clone`, {}),
  deleteEnvironment: (agentId: string, environmentId: string) => request<void>("DELETE", envPath(agentId, environmentId)),
  updateEnvironment: (agentId: string, environmentId: string, patch: Record<string, unknown>) =>
    request<Environment>("PATCH", envPath(agentId, environmentId), patch),
  regenerateWebhookSecret: (agentId: string, environmentId: string) =>
    request<{ webhookSecret: string }>("POST", `${envPath(agentId, environmentId)}/regenerate-webhook-secret`),
  regenerateFallbackSecret: (agentId: string, environmentId: string) =>
    request<{ errorFallbackWebhookSecret: string }>("POST", `${envPath(agentId, environmentId)}/regenerate-error-fallback-webhook-secret`),
  breaker: (agentId: string, environmentId: string) => request<BreakerState>("GET", `${envPath(agentId, environmentId)}/breaker`),
  sessions: (agentId: string, query: { environmentId?: string; limit?: number; cursor?: string }) => {
    const params = new URLSearchParams()
    if (query.environmentId !== undefined) params.set("environmentId", query.environmentId)
    params.set("limit", String(query.limit ?? 20))
    if (query.cursor !== undefined) params.set("cursor", query.cursor)
    return request<SessionPage>("GET", `${agentPath(agentId)}/sessions?${params}`)
  },
  session: (agentId: string, sessionId: string) => request<Session>("GET", `${agentPath(agentId)}/sessions/${enc(sessionId)}`),
  deliveries: (agentId: string, environmentId: string, limit = 50) =>
    request<DeliveryPage>("GET", `${envPath(agentId, environmentId)}/webhook-deliveries?limit=${limit}`),
  redeliver: (agentId: string, environmentId: string, deliveryId: string) =>
    request<Delivery>("POST", `${envPath(agentId, environmentId)}/webhook-deliveries/${enc(deliveryId)}/retry`)
}
