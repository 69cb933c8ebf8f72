import { generateKeyPairSync, type KeyObject, randomBytes, sign } from "node:crypto"
import { type Answer, type Override, type RecordedRequest, type RecordingServer, startRecordingServer } from "./recordingServer.js"

export type { RecordedRequest } from "./recordingServer.js"

/**
 * A Telnyx-compatible REST server on loopback for the calls callgate makes through the telnyx SDK:
 * Call Control commands `POST /v2/calls/{call_control_id}/actions/{action}` (JSON) and the TeXML
 * call update `POST /v2/texml/Accounts/{account_sid}/Calls/{call_sid}` (form-encoded), with Bearer
 * auth. Answers like Telnyx (`{"data": {"result": "ok"}}`; errors as `{"errors": [{code, title,
 * detail}]}`), keeps each call's state (after hangup, commands get 422 / 90018 "Call has already
 * ended"), records every request, and signs webhooks with its own Ed25519 key, whose public half
 * is TELNYX_PUBLIC_KEY in `env`.
 *
 *   const telnyx = await startFakeTelnyx()
 *   const app = await makeTestApp("memory", { ...telnyx.env })
 *   const body = telnyx.callControlEvent("call.initiated", { call_control_id: "v3:abc", ... })
 *   await app.inject({ method: "POST", url, payload: body, headers: { "content-type": "application/json", ...telnyx.signWebhook(body) } })
 *   await telnyx.waitFor((r) => telnyx.commands("v3:abc", "answer").length === 1)
 */
export interface FakeTelnyx {
  /** http://127.0.0.1:<port>/v2, the TELNYX_API_BASE_URL. */
  readonly apiBaseUrl: string
  readonly apiKey: string
  /** Base64 of the raw 32-byte Ed25519 public key (as Mission Control shows it). */
  readonly publicKeyBase64: string
  /** TELNYX_API_KEY, TELNYX_API_BASE_URL and TELNYX_PUBLIC_KEY for callgate's config. */
  readonly env: Record<string, string>
  readonly requests: ReadonlyArray<RecordedRequest>
  /** Call Control dial requests (outbound calls placed), in order, each with the call_control_id it was answered with. */
  readonly dialed: () => ReadonlyArray<RecordedRequest & { readonly callControlId: string }>
  /** Call Control commands, optionally for one call and one action (answer, hangup, transfer, speak, ...). */
  readonly commands: (callControlId?: string, action?: string) => ReadonlyArray<RecordedRequest>
  /** TeXML call updates, optionally for one call. */
  readonly texmlUpdates: (callSid?: string) => ReadonlyArray<RecordedRequest>
  /** The call is over: commands and updates answer 422 with error 90018. */
  readonly endCall: (callId: string) => void
  /** Telnyx does not know the call: 404. */
  readonly forgetCall: (callId: string) => void
  /** The next `times` requests fail: an HTTP status (Telnyx error body), a dropped connection, or a delay. */
  readonly failNext: (failure: { status: number; code?: string; title?: string } | { drop: true } | { delayMs: number }, times?: number) => void
  readonly waitFor: (predicate: (requests: ReadonlyArray<RecordedRequest>) => boolean, timeoutMs?: number) => Promise<ReadonlyArray<RecordedRequest>>
  /** telnyx-signature-ed25519 and telnyx-timestamp headers for `body` (timestamp in Unix seconds, default now). */
  readonly signWebhook: (body: string, timestampSeconds?: number) => Record<string, string>
  /** A Call Control webhook body (JSON text) for `eventType` with `payload`. */
  readonly callControlEvent: (eventType: string, payload: Record<string, unknown>) => string
  readonly reset: () => void
  readonly close: () => Promise<void>
}

const DIAL_PATH = /^\/v2\/calls$/
const COMMAND_PATH = /^\/v2\/calls\/([^/]+)\/actions\/([a-z_]+)$/
const TEXML_PATH = /^\/v2\/texml\/Accounts\/([^/]+)\/Calls\/([^/]+)$/

const telnyxError = (status: number, code: string, title: string, detail?: string): Answer => ({
  status,
  body: { errors: [{ code, title, ...(detail !== undefined ? { detail } : {}) }] }
})

/** Signs a webhook body the way Telnyx does: Ed25519 over `timestamp|body`, base64. */
export const telnyxWebhookHeaders = (privateKey: KeyObject, body: string, timestampSeconds = Math.floor(Date.now() / 1000)) => {
  const timestamp = String(timestampSeconds)
  return {
    "telnyx-signature-ed25519": sign(null, Buffer.from(`${timestamp}|${body}`), privateKey).toString("base64"),
    "telnyx-timestamp": timestamp
  }
}

export const startFakeTelnyx = async (options: { readonly apiKey?: string } = {}): Promise<FakeTelnyx> => {
  const apiKey = options.apiKey ?? "KEYfake-telnyx-api-key-0001"
  const { privateKey, publicKey } = generateKeyPairSync("ed25519")
  const publicKeyBase64 = publicKey.export({ format: "der", type: "spki" }).subarray(-32).toString("base64")
  const ended = new Set<string>()
  const dialed: Array<RecordedRequest & { readonly callControlId: string }> = []
  const unknown = new Set<string>()
  const decode = (segment: string) => decodeURIComponent(segment)

  const respond = (request: RecordedRequest): Answer => {
    if (request.headers.authorization !== `Bearer ${apiKey}`) {
      return telnyxError(401, "10009", "Authentication failed", "The required authentication headers were either invalid or not included in the request.")
    }
    if (request.method === "POST" && DIAL_PATH.test(request.path)) {
      // Call Control dial: a new outbound call on the connection.
      const body = request.json as { connection_id?: string; to?: string; from?: string } | undefined
      if (body?.connection_id === undefined || body.to === undefined || body.from === undefined) {
        return telnyxError(422, "10032", "Missing required parameter", "connection_id, to and from are required.")
      }
      const callControlId = `v3:${randomBytes(12).toString("base64url")}`
      dialed.push({ ...request, callControlId })
      return {
        status: 200,
        body: {
          data: {
            call_control_id: callControlId,
            call_leg_id: crypto.randomUUID(),
            call_session_id: crypto.randomUUID(),
            is_alive: false,
            record_type: "call"
          }
        }
      }
    }
    const command = COMMAND_PATH.exec(request.path)
    const texml = TEXML_PATH.exec(request.path)
    if (request.method !== "POST" || (command === null && texml === null)) return telnyxError(404, "10005", "Resource not found")
    const callId = decode(command !== null ? command[1]! : texml![2]!)
    if (unknown.has(callId)) return telnyxError(404, "10005", "Resource not found", "The requested resource or URL could not be found.")
    if (ended.has(callId)) return telnyxError(422, "90018", "Call has already ended", "This call is no longer active and can't receive commands.")
    if (command !== null) {
      if (request.json === undefined || typeof request.json !== "object") return telnyxError(400, "10015", "Bad Request")
      const action = command[2]!
      if (action === "hangup" || action === "reject") ended.add(callId)
      return { status: 200, body: { data: { result: "ok" } } }
    }
    const form = request.form ?? {}
    if (form.Status === "completed") ended.add(callId)
    return {
      status: 200,
      body: { account_sid: decode(texml![1]!), call_sid: callId, sid: callId, status: form.Status ?? "in-progress", api_version: "2010-04-01" }
    }
  }

  const server: RecordingServer = await startRecordingServer(respond)
  const apiBaseUrl = `${server.origin}/v2`
  return {
    apiBaseUrl,
    apiKey,
    publicKeyBase64,
    env: { TELNYX_API_KEY: apiKey, TELNYX_API_BASE_URL: apiBaseUrl, TELNYX_PUBLIC_KEY: publicKeyBase64 },
    requests: server.requests,
    commands: (callControlId, action) =>
      server.requests.filter((r) => {
        const match = COMMAND_PATH.exec(r.path)
        return match !== null && (callControlId === undefined || decode(match[1]!) === callControlId) && (action === undefined || match[2] === action)
      }),
    texmlUpdates: (callSid) =>
      server.requests.filter((r) => {
        const match = TEXML_PATH.exec(r.path)
        return match !== null && (callSid === undefined || decode(match[2]!) === callSid)
      }),
    dialed: () => dialed,
    endCall: (callId) => void ended.add(callId),
    forgetCall: (callId) => void unknown.add(callId),
    failNext: (failure, times = 1) => {
      const override: Override =
        "status" in failure
          ? telnyxError(failure.status, failure.code ?? (failure.status >= 500 ? "10007" : "10015"), failure.title ?? (failure.status >= 500 ? "Unexpected error" : "Bad Request"))
          : failure
      server.override(override, times)
    },
    waitFor: server.waitFor,
    signWebhook: (body, timestampSeconds) => telnyxWebhookHeaders(privateKey, body, timestampSeconds),
    callControlEvent: (eventType, payload) =>
      JSON.stringify({
        data: { record_type: "event", event_type: eventType, id: crypto.randomUUID(), occurred_at: new Date().toISOString(), payload },
        meta: { attempt: 1, delivered_to: "http://callgate.test/telephony/telnyx/call-control" }
      }),
    reset: () => {
      server.reset()
      ended.clear()
      dialed.length = 0
      unknown.clear()
    },
    close: server.close
  }
}
