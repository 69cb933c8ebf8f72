import { createHmac } from "node:crypto"
import type { WebhookSignatureScheme } from "../environments/EnvironmentSchema.js"
import { type RawBody, signatureHeaders } from "./Signing.js"

/**
 * Standard Webhooks signing (standardwebhooks.com, docs/webhooks.md, "Signature schemes"), for event
 * webhooks of environments whose `webhookSignatureScheme` is `standard` or `both`:
 *
 *   webhook-id: <the delivery id, the same on every attempt>
 *   webhook-timestamp: <Unix seconds of this attempt>
 *   webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<raw body>">
 *
 * The key is the secret's bytes as the spec defines them: the base64 after `whsec_` decoded
 * (callgate's secrets are `whsec_` + base64 of 32 random bytes), so a receiver hands the secret as
 * shown to any Standard Webhooks library unchanged. The interface's scheme keys with the secret's
 * text instead (Signing.ts); both are over the same body.
 */
export const STANDARD_ID_HEADER = "webhook-id"
export const STANDARD_TIMESTAMP_HEADER = "webhook-timestamp"
export const STANDARD_SIGNATURE_HEADER = "webhook-signature"

const SECRET_PREFIX = "whsec_"
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/

/** The HMAC key of a `whsec_<base64>` secret; undefined for a secret of another shape (never the case for generated ones). */
export const standardKey = (secret: string): Buffer | undefined => {
  if (!secret.startsWith(SECRET_PREFIX)) return undefined
  const encoded = secret.slice(SECRET_PREFIX.length)
  if (encoded.length === 0 || !BASE64.test(encoded)) return undefined
  return Buffer.from(encoded, "base64")
}

/** `v1,<base64>` over `<id>.<timestamp>.<raw body>`. */
export const standardSignature = (key: Uint8Array, id: string, timestampSeconds: number, rawBody: RawBody): string =>
  `v1,${createHmac("sha256", key)
    .update(`${id}.${timestampSeconds}.`, "utf8")
    .update(typeof rawBody === "string" ? Buffer.from(rawBody, "utf8") : rawBody)
    .digest("base64")}`

/** The three Standard Webhooks headers, or none without a usable secret (such requests go unsigned, as with the interface's scheme). */
export const standardSignatureHeaders = (
  secret: string | undefined,
  id: string,
  timestampSeconds: number,
  rawBody: RawBody
): Record<string, string> => {
  const key = secret === undefined ? undefined : standardKey(secret)
  if (key === undefined) return {}
  return {
    [STANDARD_ID_HEADER]: id,
    [STANDARD_TIMESTAMP_HEADER]: String(timestampSeconds),
    [STANDARD_SIGNATURE_HEADER]: standardSignature(key, id, timestampSeconds, rawBody)
  }
}

/** The signing headers of one event-webhook attempt under the environment's scheme. */
export const eventSignatureHeaders = (
  scheme: WebhookSignatureScheme,
  secret: string | undefined,
  deliveryId: string,
  timestampSeconds: number,
  rawBody: RawBody
): Record<string, string> => ({
  ...(scheme !== "standard" ? signatureHeaders(secret, timestampSeconds, rawBody) : {}),
  ...(scheme !== "service" ? standardSignatureHeaders(secret, deliveryId, timestampSeconds, rawBody) : {})
})
