import type { IncomingHttpHeaders } from "node:http"
import { Effect, Option, Redacted } from "effect"
import { TelnyxWebhook } from "telnyx/lib/webhooks"
import twilio from "twilio"

/**
 * Checks that a request really comes from the carrier. URLs are always rebuilt from PUBLIC_URL
 * (what the carrier was told to call), never from Host or X-Forwarded-* headers, which a caller
 * controls. Pure functions over the configuration: the HTTP entry endpoints and the media-stream
 * WebSocket upgrade both use them.
 */
export interface TwilioSigningConfig {
  /** PUBLIC_URL, without a trailing slash. */
  readonly publicUrl: string
  /** FLEET_URL: the load balancer's address that voice webhooks are configured with, when not PUBLIC_URL. */
  readonly fleetUrl?: Option.Option<string>
  readonly twilioAuthToken: Option.Option<Redacted.Redacted<string>>
}

const header = (headers: IncomingHttpHeaders, name: string): string | undefined => {
  const value = headers[name]
  return typeof value === "string" ? value : undefined
}

/** PUBLIC_URL with ws:// or wss:// for https:// (the scheme of callgate's media streams). */
export const publicWsUrl = (publicUrl: string): string => publicUrl.replace(/^http(s?):\/\//i, (_m, s: string) => `ws${s}://`)

/**
 * X-Twilio-Signature on a voice webhook: HMAC-SHA1 (the SDK's validateRequest) over
 * PUBLIC_URL + path and query as received, plus the form parameters; in a fleet behind a load
 * balancer, over FLEET_URL + path and query (both are configuration, never request headers).
 * True when it matches, or when TWILIO_AUTH_TOKEN is not set (checks are off, for local development).
 */
export const verifyTwilioWebhook = (
  config: TwilioSigningConfig,
  requestUrl: string,
  headers: IncomingHttpHeaders,
  params: Record<string, string>
): boolean => {
  if (Option.isNone(config.twilioAuthToken)) return true
  const signature = header(headers, "x-twilio-signature")
  if (signature === undefined || signature.length === 0) return false
  const token = Redacted.value(config.twilioAuthToken.value)
  const bases = [config.publicUrl, ...(config.fleetUrl !== undefined && Option.isSome(config.fleetUrl) ? [config.fleetUrl.value] : [])]
  return bases.some((base) => twilio.validateRequest(token, signature, base + requestUrl, params))
}

/**
 * X-Twilio-Signature on a Media Stream's WebSocket upgrade: signed over the wss:// URL of the
 * stream (PUBLIC_URL's host, the path and query as received) with no parameters. For the stream
 * handler: `verifyTwilioStreamUpgrade(config, request.url, request.headers)`. True when it matches
 * or when TWILIO_AUTH_TOKEN is not set.
 */
export const verifyTwilioStreamUpgrade = (config: TwilioSigningConfig, requestUrl: string, headers: IncomingHttpHeaders): boolean => {
  if (Option.isNone(config.twilioAuthToken)) return true
  const signature = header(headers, "x-twilio-signature")
  if (signature === undefined || signature.length === 0) return false
  return twilio.validateRequest(Redacted.value(config.twilioAuthToken.value), signature, publicWsUrl(config.publicUrl) + requestUrl, {})
}

/** Why a Telnyx webhook was refused; never includes the signature or key. */
export type TelnyxVerification = { readonly valid: true } | { readonly valid: false; readonly reason: string }

/** The Telnyx webhook check an entry is given (makeTelnyxVerifier's `verify`). */
export type TelnyxVerifier = (rawBody: Buffer | undefined, headers: IncomingHttpHeaders) => Effect.Effect<TelnyxVerification>

/**
 * Ed25519 verification of Telnyx webhooks (headers telnyx-signature-ed25519 and telnyx-timestamp,
 * signed over `timestamp|raw body`, timestamps older or newer than 5 minutes refused), through the
 * telnyx SDK's TelnyxWebhook. Built once from TELNYX_PUBLIC_KEY (base64, 32 bytes); with no key,
 * every webhook is accepted (local development); with a malformed key, every webhook is refused.
 */
export const makeTelnyxVerifier = (publicKey: Option.Option<string>) => {
  if (Option.isNone(publicKey)) return { enabled: false, verify: () => Effect.succeed<TelnyxVerification>({ valid: true }) } as const
  let verifier: TelnyxWebhook | undefined
  try {
    verifier = new TelnyxWebhook(publicKey.value.trim())
  } catch {
    verifier = undefined
  }
  const verify = (rawBody: Buffer | undefined, headers: IncomingHttpHeaders): Effect.Effect<TelnyxVerification> => {
    if (verifier === undefined) return Effect.succeed({ valid: false, reason: "TELNYX_PUBLIC_KEY is not a base64 Ed25519 public key" })
    const signature = header(headers, "telnyx-signature-ed25519")
    const timestamp = header(headers, "telnyx-timestamp")
    if (signature === undefined || timestamp === undefined) return Effect.succeed({ valid: false, reason: "signature headers missing" })
    const body = rawBody?.toString("utf8") ?? ""
    return Effect.tryPromise(() =>
      verifier!.verify(body, { "telnyx-signature-ed25519": signature, "telnyx-timestamp": timestamp })
    ).pipe(
      Effect.as<TelnyxVerification>({ valid: true }),
      Effect.catchAll((error) =>
        Effect.succeed<TelnyxVerification>({
          valid: false,
          reason: /timestamp/i.test(String((error.error as Error | undefined)?.message)) ? "timestamp outside the 5 minute tolerance" : "signature does not match"
        })
      )
    )
  }
  return { enabled: true, keyValid: verifier !== undefined, verify } as const
}
