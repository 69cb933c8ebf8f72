import { createHmac, randomBytes, randomUUID } from "node:crypto"
import { SimError, redactUrl } from "./SimCall.js"
import { parseStreamMarkup, type StreamInstruction } from "./StreamMarkup.js"

/** What the gateway's call entry endpoint answered. */
export interface EntryAnswer {
  readonly status: number
  readonly markup: string
  readonly stream: StreamInstruction
  /** The URL the simulator connected to (the stream URL, possibly moved onto the gateway's origin). */
  readonly connectUrl: string
}

export const twilioSid = (prefix: "CA" | "AC" | "MZ") => prefix + randomBytes(16).toString("hex")
export const telnyxCallControlId = () => `v3:${randomBytes(30).toString("base64url")}`
export const uuid = () => randomUUID()

/**
 * X-Twilio-Signature: HMAC-SHA1 keyed with the auth token over the full URL followed by every
 * POST parameter as name+value, sorted by name; base64. A WebSocket upgrade is signed over the
 * stream URL alone.
 */
export const twilioSignature = (authToken: string, url: string, params: Readonly<Record<string, string>> = {}) =>
  createHmac("sha1", authToken)
    .update(
      url +
        Object.keys(params)
          .sort()
          .map((key) => key + params[key])
          .join("")
    )
    .digest("base64")

/** The entry endpoint for a provider, with the agent and environment in its query. */
export const entryUrl = (gatewayUrl: string, path: string, agentId: string, environmentId: string) => {
  const url = new URL(path, gatewayUrl.endsWith("/") ? gatewayUrl : `${gatewayUrl}/`)
  url.searchParams.set("agentId", agentId)
  url.searchParams.set("environmentId", environmentId)
  return url.toString()
}

/**
 * Moves a stream URL onto the gateway's own origin (ws for http, wss for https), keeping its path
 * and query: for a gateway whose PUBLIC_URL is a name the simulator cannot reach.
 */
export const onGatewayOrigin = (streamUrl: string, gatewayUrl: string) => {
  const stream = new URL(streamUrl)
  const gateway = new URL(gatewayUrl)
  stream.protocol = gateway.protocol === "https:" ? "wss:" : "ws:"
  stream.host = gateway.host
  return stream.toString()
}

/** Posts a form-encoded carrier webhook and reads the `<Connect><Stream>` out of the answer. */
export const postEntryWebhook = async (
  url: string,
  params: Readonly<Record<string, string>>,
  headers: Readonly<Record<string, string>> = {},
  body: string = new URLSearchParams(params).toString()
): Promise<Omit<EntryAnswer, "connectUrl">> => {
  let response: Response
  try {
    response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
      body,
      redirect: "manual",
      signal: AbortSignal.timeout(15_000)
    })
  } catch (error) {
    throw new SimError(`voice webhook ${redactUrl(url)} unreachable: ${(error as Error).message}`, "webhook")
  }
  const markup = await response.text()
  if (response.status < 200 || response.status > 299) {
    throw new SimError(`voice webhook ${redactUrl(url)} answered HTTP ${response.status}: ${markup.slice(0, 300)}`, "webhook", response.status, markup)
  }
  return { status: response.status, markup, stream: parseStreamMarkup(markup) }
}
