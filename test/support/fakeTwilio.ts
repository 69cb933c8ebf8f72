import { createHmac, randomBytes } from "node:crypto"
import { type Answer, type Override, type RecordedRequest, type RecordingServer, startRecordingServer } from "./recordingServer.js"

export type { RecordedRequest } from "./recordingServer.js"

/**
 * A Twilio-compatible REST server on loopback for the calls callgate makes through the twilio SDK:
 * `POST /2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json` (form-encoded Status / Twiml),
 * with Basic auth. Answers like Twilio (call resource JSON; error JSON with code, message,
 * more_info, status), keeps each call's state (a call updated to completed is over: later updates
 * get 21220), and records every request.
 *
 *   const twilio = await startFakeTwilio()
 *   const app = await makeTestApp("memory", { ...twilio.env })      // TWILIO_* pointed at it
 *   ...
 *   expect(twilio.callUpdates("CA123")[0]!.form).toEqual({ Status: "completed" })
 */
export interface FakeTwilio {
  readonly baseUrl: string
  readonly accountSid: string
  readonly authToken: string
  /** TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN and TWILIO_API_BASE_URL for callgate's config. */
  readonly env: Record<string, string>
  readonly requests: ReadonlyArray<RecordedRequest>
  /** Calls.create requests (outbound calls placed), in order; each answered with a new CallSid. */
  readonly createdCalls: () => ReadonlyArray<RecordedRequest & { readonly callSid: string }>
  /** The call update requests, optionally for one call. */
  readonly callUpdates: (callSid?: string) => ReadonlyArray<RecordedRequest>
  /** The call is over: updates answer 400 with error 21220 (Call is not in-progress). */
  readonly endCall: (callSid: string) => void
  /** Twilio does not know the call: updates answer 404 (error 20404). */
  readonly forgetCall: (callSid: string) => void
  /** The next `times` requests fail: an HTTP status (Twilio error body), a dropped connection, or a delay. */
  readonly failNext: (failure: { status: number; code?: number; message?: string } | { drop: true } | { delayMs: number }, times?: number) => void
  readonly waitForRequests: (count: number, timeoutMs?: number) => Promise<ReadonlyArray<RecordedRequest>>
  /** X-Twilio-Signature for a request to `url` with form `params`, signed with this account's auth token. */
  readonly sign: (url: string, params?: Record<string, string>) => string
  readonly reset: () => void
  readonly close: () => Promise<void>
}

const CALL_PATH = /^\/2010-04-01\/Accounts\/([^/]+)\/Calls\/([^/]+)\.json$/
const CALLS_PATH = /^\/2010-04-01\/Accounts\/([^/]+)\/Calls\.json$/

const twilioError = (status: number, code: number, message: string): Answer => ({
  status,
  body: { code, message, more_info: `https://www.twilio.com/docs/errors/${code}`, status }
})

/** Twilio's request signature (HMAC-SHA1 of the URL followed by the sorted form keys and values), computed independently of the SDK. */
export const twilioSignature = (authToken: string, url: string, params: Record<string, string> = {}) =>
  createHmac("sha1", authToken)
    .update(Object.keys(params).sort().reduce((data, key) => data + key + params[key], url))
    .digest("base64")

export const startFakeTwilio = async (
  options: { readonly accountSid?: string; readonly authToken?: string } = {}
): Promise<FakeTwilio> => {
  const accountSid = options.accountSid ?? "AC00000000000000000000000000000001"
  const authToken = options.authToken ?? "fake-twilio-auth-token-0001"
  const expectedAuth = `Basic ${Buffer.from(`${accountSid}:${authToken}`).toString("base64")}`
  const ended = new Set<string>()
  const created: Array<RecordedRequest & { readonly callSid: string }> = []
  const unknown = new Set<string>()

  const respond = (request: RecordedRequest): Answer => {
    if (request.headers.authorization !== expectedAuth) return twilioError(401, 20003, "Authenticate")
    const create = CALLS_PATH.exec(request.path)
    if (request.method === "POST" && create !== null) {
      // Calls.create: a new outbound call, queued.
      const form = request.form ?? {}
      if (form.To === undefined || form.From === undefined || (form.Url === undefined && form.Twiml === undefined)) {
        return twilioError(400, 21201, "No 'To', 'From' and 'Url' or 'Twiml' parameter provided")
      }
      const sid = `CA${randomBytes(16).toString("hex")}`
      created.push({ ...request, callSid: sid })
      return {
        status: 201,
        body: {
          sid,
          account_sid: create[1],
          status: "queued",
          direction: "outbound-api",
          from: form.From,
          to: form.To,
          date_created: new Date().toUTCString(),
          api_version: "2010-04-01",
          uri: `/2010-04-01/Accounts/${create[1]}/Calls/${sid}.json`
        }
      }
    }
    const match = CALL_PATH.exec(request.path)
    if (request.method !== "POST" || match === null) return twilioError(404, 20404, `The requested resource ${request.path} was not found`)
    const [, account, callSid] = match as unknown as [string, string, string]
    if (unknown.has(callSid)) return twilioError(404, 20404, `The requested resource ${request.path} was not found`)
    if (ended.has(callSid)) return twilioError(400, 21220, "Call is not in-progress. Cannot redirect.")
    const form = request.form ?? {}
    if (form.Status === undefined && form.Twiml === undefined && form.Url === undefined) {
      return twilioError(400, 21201, "No 'Url', 'Twiml' or 'Status' parameter provided")
    }
    if (form.Status === "completed" || form.Status === "canceled") ended.add(callSid)
    return {
      status: 200,
      body: {
        sid: callSid,
        account_sid: account,
        status: form.Status ?? "in-progress",
        direction: "inbound",
        from: "+14155550100",
        to: "+14155550111",
        date_updated: new Date().toUTCString(),
        api_version: "2010-04-01",
        uri: `/2010-04-01/Accounts/${account}/Calls/${callSid}.json`
      }
    }
  }

  const server: RecordingServer = await startRecordingServer(respond)
  return {
    baseUrl: server.origin,
    accountSid,
    authToken,
    env: { TWILIO_ACCOUNT_SID: accountSid, TWILIO_AUTH_TOKEN: authToken, TWILIO_API_BASE_URL: server.origin },
    requests: server.requests,
    callUpdates: (callSid) =>
      server.requests.filter((r) => {
        const match = CALL_PATH.exec(r.path)
        return match !== null && (callSid === undefined || match[2] === callSid)
      }),
    createdCalls: () => created,
    endCall: (callSid) => void ended.add(callSid),
    forgetCall: (callSid) => void unknown.add(callSid),
    failNext: (failure, times = 1) => {
      const override: Override =
        "status" in failure
          ? twilioError(failure.status, failure.code ?? (failure.status >= 500 ? 20500 : 20001), failure.message ?? "Internal Server Error")
          : failure
      server.override(override, times)
    },
    waitForRequests: (count, timeoutMs) => server.waitFor((requests) => requests.length >= count, timeoutMs),
    sign: (url, params) => twilioSignature(authToken, url, params),
    reset: () => {
      server.reset()
      ended.clear()
      created.length = 0
      unknown.clear()
    },
    close: server.close
  }
}
