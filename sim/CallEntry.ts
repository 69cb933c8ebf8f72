import { createHmac, randomBytes, randomUUID } from "node:crypto"
import { type SimCall, SimError, redactUrl } from "./SimCall.js"
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

/**
 * The entry endpoint for a provider, with the agent and environment in its query, then any custom
 * parameters (`&lang=es`: the agent finds them in `start.customParameters`).
 */
export const entryUrl = (gatewayUrl: string, path: string, agentId: string, environmentId: string, parameters: Readonly<Record<string, string>> = {}) => {
  const url = new URL(path, gatewayUrl.endsWith("/") ? gatewayUrl : `${gatewayUrl}/`)
  url.searchParams.set("agentId", agentId)
  url.searchParams.set("environmentId", environmentId)
  for (const [name, value] of Object.entries(parameters)) url.searchParams.append(name, value)
  return url.toString()
}

/**
 * Moves a stream URL onto the gateway's own origin (ws for http, wss for https), keeping its path
 * and query: for a gateway whose PUBLIC_URL is a name the simulator cannot reach.
 */
export const onGatewayOrigin = (streamUrl: string, gatewayUrl: string) =>
  movedOnto(streamUrl, gatewayUrl, (gateway) => (gateway.protocol === "https:" ? "wss:" : "ws:"))

/** `url` with the gateway's host and the scheme `protocolOf` picks for it; path and query kept. */
const movedOnto = (url: string, gatewayUrl: string, protocolOf: (gateway: URL) => string) => {
  const moved = new URL(url)
  const gateway = new URL(gatewayUrl)
  moved.protocol = protocolOf(gateway)
  moved.host = gateway.host
  return moved.toString()
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

/** What the gateway answered when the simulator, as the carrier, followed the entry answer's `<Redirect>`. */
export interface RedirectAnswer {
  /** The URL the redirect named (what the request is signed over). */
  readonly url: string
  readonly status: number
  readonly markup: string
  /** `Date.now()` when the answer arrived. */
  readonly answeredAt: number
}

/** Moves an http(s) URL onto the gateway's origin, keeping its path and query (see onGatewayOrigin). */
export const onGatewayHttpOrigin = (url: string, gatewayUrl: string) => movedOnto(url, gatewayUrl, (gateway) => gateway.protocol)

/**
 * Does what a carrier does after a `<Connect><Stream>` that the gateway ended (closed by the
 * gateway, or its socket died): goes on to the document's next verb, the `<Redirect>`, and posts
 * the call's form there, signed by `headers(url, body)`. Set as `call.redirected` (undefined when
 * the simulator hung up, or the answer had no `<Redirect>`). The simulator cannot see a REST
 * update that replaced the call's document meanwhile, so it follows the redirect whenever the
 * gateway ended the stream; callgate answers such a call with a plain hang-up.
 */
export const followRedirectAfterStream = (
  call: SimCall,
  options: {
    readonly params: Readonly<Record<string, string>>
    readonly headers: (url: string, body: string, params: Readonly<Record<string, string>>) => Record<string, string>
    /** Post to the same path and query on this base URL (a public URL the simulator cannot reach). */
    readonly via?: string
  }
): void => {
  const redirect = call.entry?.stream.redirect
  if (redirect === undefined) return
  call.redirected = call.closed.then(async (closed): Promise<RedirectAnswer | undefined> => {
    if (closed.by === "simulator") return undefined
    const params = { ...options.params, CallStatus: "in-progress" }
    const body = new URLSearchParams(params).toString()
    const target = options.via === undefined ? redirect.url : onGatewayHttpOrigin(redirect.url, options.via)
    const headers = options.headers(redirect.url, body, params)
    try {
      const response =
        redirect.method === "GET"
          ? await fetch(`${target}${target.includes("?") ? "&" : "?"}${body}`, { headers, redirect: "manual", signal: AbortSignal.timeout(15_000) })
          : await fetch(target, {
              method: "POST",
              headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
              body,
              redirect: "manual",
              signal: AbortSignal.timeout(15_000)
            })
      return { url: redirect.url, status: response.status, markup: await response.text(), answeredAt: Date.now() }
    } catch (error) {
      throw new SimError(`<Redirect> ${redactUrl(redirect.url)} unreachable: ${(error as Error).message}`, "webhook")
    }
  })
  // Never an unhandled rejection for callers that do not look.
  call.redirected.catch(() => {})
}
