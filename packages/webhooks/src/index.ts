import { createHmac, timingSafeEqual } from "node:crypto"

/**
 * `@callgate/webhooks`: request signing for callgate's event and error fallback webhooks
 * (docs/webhooks.md, "Verifying on the receiver"). Pure: no I/O, no clock unless `now` is omitted.
 * Receivers install this package to verify requests; callgate signs with it (src/webhooks/Signing.ts
 * re-exports it), so it depends on nothing but node:crypto.
 */

export const SIGNATURE_HEADER = "X-Service-Signature"
export const TIMESTAMP_HEADER = "X-Service-Timestamp"
export const DELIVERY_ID_HEADER = "X-Service-Delivery-Id"
export const ATTEMPT_HEADER = "X-Service-Attempt"

/** Receivers reject timestamps further than this from their clock (docs/webhooks.md, "Verifying on the receiver"). */
export const DEFAULT_TOLERANCE_SECONDS = 300

const SIGNATURE_PREFIX = "sha256="

export type RawBody = string | Uint8Array

const toBytes = (body: RawBody): Uint8Array => (typeof body === "string" ? Buffer.from(body, "utf8") : body)

const digest = (secret: string, timestamp: string, rawBody: RawBody): Buffer =>
  createHmac("sha256", Buffer.from(secret, "utf8")).update(`${timestamp}.`, "utf8").update(toBytes(rawBody)).digest()

/**
 * The `X-Service-Signature` value for a request: `sha256=<hex>`, the HMAC-SHA256 of
 * `<timestamp>.<raw body bytes>` keyed with the UTF-8 bytes of the whole secret (`whsec_` included).
 */
export const signPayload = (secret: string, timestamp: number | string, rawBody: RawBody): string =>
  `${SIGNATURE_PREFIX}${digest(secret, String(timestamp), rawBody).toString("hex")}`

/** A header as Node hands it over: absent, one value, or (when repeated) several. */
export type HeaderValue = string | number | ReadonlyArray<string> | null | undefined

export interface VerifyOptions {
  /** The environment's secret, exactly as shown when it was generated. */
  readonly secret: string
  /** The `X-Service-Signature` header. */
  readonly signature: HeaderValue
  /** The `X-Service-Timestamp` header. */
  readonly timestamp: HeaderValue
  /** The request body exactly as received, before any JSON parsing. */
  readonly rawBody: RawBody
  /** Largest accepted distance between the timestamp and `now`, in seconds. Default 300. */
  readonly toleranceSeconds?: number
  /** The current time: Unix seconds, or a Date. Default: the system clock. */
  readonly now?: number | Date
}

const single = (value: HeaderValue): string | undefined => {
  if (typeof value === "number") return String(value)
  if (typeof value === "string") return value
  // A repeated header is ambiguous: refuse it rather than guess which copy was signed.
  if (Array.isArray(value) && value.length === 1 && typeof value[0] === "string") return value[0]
  return undefined
}

const HEX_DIGEST = /^[0-9a-f]{64}$/i

/**
 * True only when both headers are present, the timestamp is an integer within `toleranceSeconds`
 * of `now` (absolute difference), and the signature matches the body under `secret`; the digests
 * are compared in constant time. Never throws on malformed input: it is simply not valid.
 */
export const verifySignature = (options: VerifyOptions): boolean => {
  const { rawBody, secret } = options
  if (typeof secret !== "string" || secret.length === 0) return false
  if (typeof rawBody !== "string" && !(rawBody instanceof Uint8Array)) return false
  const signature = single(options.signature)?.trim()
  const timestamp = single(options.timestamp)?.trim()
  if (signature === undefined || timestamp === undefined) return false
  if (!/^\d{1,15}$/.test(timestamp)) return false

  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS
  if (!Number.isFinite(tolerance) || tolerance < 0) return false
  const now =
    options.now === undefined
      ? Date.now() / 1000
      : options.now instanceof Date
        ? options.now.getTime() / 1000
        : options.now
  if (!Number.isFinite(now) || Math.abs(now - Number(timestamp)) > tolerance) return false

  if (!signature.toLowerCase().startsWith(SIGNATURE_PREFIX)) return false
  const presentedHex = signature.slice(SIGNATURE_PREFIX.length)
  if (!HEX_DIGEST.test(presentedHex)) return false
  const presented = Buffer.from(presentedHex, "hex")
  const expected = digest(secret, timestamp, rawBody)
  // src/secrets/ConstantTime.ts's comparison; this package stands alone, so it calls node:crypto itself.
  return presented.length === expected.length && timingSafeEqual(presented, expected)
}

/**
 * The signing headers for one attempt, or none for an environment without a secret (docs/webhooks.md:
 * such requests go unsigned, without either header).
 */
export const signatureHeaders = (
  secret: string | undefined,
  timestampSeconds: number,
  rawBody: RawBody
): Record<string, string> =>
  secret === undefined
    ? {}
    : {
        [SIGNATURE_HEADER]: signPayload(secret, timestampSeconds, rawBody),
        [TIMESTAMP_HEADER]: String(timestampSeconds)
      }

/** The `session.ended` payload (docs/webhooks.md, "The request"); callgate's schema of it is checked against this type. */
export interface SessionEndedEvent {
  readonly event: "session.ended"
  readonly sessionId: string
  readonly agentId: string
  readonly environmentId: string
  /** completed, failed or timeout */
  readonly status: string
  /** ISO 8601 */
  readonly createdAt: string
  readonly agentPhoneNumber?: string | undefined
  readonly clientPhoneNumber?: string | undefined
  /** Whole seconds, as a string */
  readonly duration?: string | undefined
  readonly direction: "inbound" | "outbound"
  readonly provider?: "twilio" | "telnyx" | undefined
  readonly callId?: string | undefined
  readonly endReason?: string | undefined
  /** Agent failovers of the session: times its agent leg ended abnormally and callgate sought another agent instead of ending the call (taken over, or the fallback after agentFailoverTimeout) */
  readonly agentFailovers?: number | undefined
  /** Present when the call was recorded and its file is complete */
  readonly recording?:
    | {
        readonly url: string
        readonly durationMs: number
        readonly pauses: ReadonlyArray<{ readonly startMs: number; readonly endMs: number }>
      }
    | undefined
  /** The call's transfers with their outcomes, when it was transferred (sent once the last outcome is known) */
  readonly transfers?:
    | ReadonlyArray<{
        readonly to: string
        readonly initiatedBy: "agent" | "fallback"
        readonly status: "answered" | "busy" | "no-answer" | "failed" | "canceled"
        readonly ringMs: number
        readonly talkMs: number
        readonly startedAt: string
        readonly endedAt: string
        readonly carrierStatus: string | null
        readonly transferFailedMessage: boolean
      }>
    | undefined
}
