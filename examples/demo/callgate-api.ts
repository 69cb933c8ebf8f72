/**
 * callgate's management API (/v1) with plain fetch, as any client would call it: a bearer key,
 * JSON in, `{"data": ...}` out, `{"error": {"code", "message"}}` on failure. Only the fields the
 * demo reads are typed here.
 */
import { DemoFailure } from "./steps.js"

export interface Environment {
  readonly id: string
  readonly webhookUrl: string | null
  /** Present only in the response that generated it. */
  readonly webhookSecret?: string
  readonly webhookSecretLast4: string | null
  readonly errorFallbackType: "disabled" | "phone" | "webhook"
  readonly errorFallbackValue: string | null
  readonly errorFallbackTimeout: number
  readonly errorFallbackOccurrenceThreshold: number
  readonly errorFallbackTimeWindow: number
  readonly errorFallbackWebhookSecret: string | null
}

export interface Turn {
  readonly index: number
  readonly input: "speech" | "dtmf"
  readonly callerEndedAt: string
  readonly agentRespondedAt: string | null
  readonly latencyMs: number | null
  readonly timeoutOccurrences: number
}

export interface Session {
  readonly id: string
  readonly status: string
  readonly endReason: string | null
  readonly createdAt: string
  readonly endedAt: string | null
  readonly turns: ReadonlyArray<Turn>
  readonly fallback: null | {
    readonly trigger: string
    readonly type: string
    readonly outcome: string
    readonly startedAt: string
    readonly carrierRequestAt: string | null
    readonly finishedAt: string
    readonly webhookStatus: number | null
  }
}

export const callgateApi = (baseUrl: string, apiKey: string) => {
  const call = async <A>(method: string, path: string, body?: object): Promise<A> => {
    let response: Response
    try {
      response = await fetch(`${baseUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${apiKey}`, ...(body ? { "content-type": "application/json" } : {}) },
        body: body ? JSON.stringify(body) : undefined,
        signal: AbortSignal.timeout(5000)
      })
    } catch (error) {
      throw new DemoFailure(`${method} ${path} failed: ${(error as Error).message}`)
    }
    const text = await response.text()
    let parsed: { data?: A; error?: { code?: string; message?: string } } | undefined
    try {
      parsed = JSON.parse(text)
    } catch {
      parsed = undefined
    }
    if (!response.ok || parsed?.data === undefined) {
      const reason = parsed?.error ? `${parsed.error.code}: ${parsed.error.message}` : text.slice(0, 200)
      throw new DemoFailure(`${method} ${path} answered HTTP ${response.status} (${reason})`)
    }
    return parsed.data
  }
  return {
    createEnvironment: (agentId: string, name: string) => call<Environment>("POST", `/v1/agents/${agentId}/environments`, { name }),
    updateEnvironment: (agentId: string, environmentId: string, patch: object) =>
      call<Environment>("PATCH", `/v1/agents/${agentId}/environments/${environmentId}`, patch),
    session: (agentId: string, sessionId: string) => call<Session>("GET", `/v1/agents/${agentId}/sessions/${sessionId}`),
    /** The Prometheus text of /metrics (no key needed). */
    metrics: async () => (await fetch(`${baseUrl}/metrics`, { signal: AbortSignal.timeout(5000) })).text()
  }
}

export type CallgateApi = ReturnType<typeof callgateApi>
