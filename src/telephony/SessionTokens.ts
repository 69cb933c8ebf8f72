import { createHmac, randomBytes, timingSafeEqual } from "node:crypto"
import { Effect, Option, Schema } from "effect"
import type { CallKind } from "../core/Carrier.js"

/**
 * Short-lived tokens that callgate's call entry endpoints hand to the carrier (as a stream
 * <Parameter>, a stream URL query parameter or a Telnyx stream_auth_token), and that every media
 * stream must present before any agent hears it. HMAC-SHA256 over the claims with a per-process
 * random key; they expire after `TOKEN_TTL_MS` (a carrier opens the stream within seconds).
 */
export const SessionClaims = Schema.Struct({
  /** An inbound call's session id, minted at the entry: the stream's session takes it, the entry answer's `<Redirect>` names it. */
  entrySessionId: Schema.optional(Schema.String),
  agentId: Schema.String,
  environmentId: Schema.String,
  kind: Schema.Literal("twilio", "telnyx-texml", "telnyx-call-control"),
  callId: Schema.String,
  from: Schema.optional(Schema.String),
  to: Schema.optional(Schema.String),
  direction: Schema.optional(Schema.Literal("inbound", "outbound")),
  accountSid: Schema.optional(Schema.String),
  /** An outbound call callgate placed: the session it opens (see SessionRegistry.expectOutbound). */
  sessionId: Schema.optional(Schema.String),
  /** Expiry, Unix milliseconds. */
  exp: Schema.Number
})
export type SessionClaims = typeof SessionClaims.Type

export const TOKEN_TTL_MS = 5 * 60 * 1000

const decodeClaims = Schema.decodeUnknownOption(Schema.parseJson(SessionClaims))

export const makeSessionTokens = (key: Uint8Array, now: () => number = Date.now) => {
  const mac = (body: string) => createHmac("sha256", key).update(body).digest()
  return {
    issue: (claims: Omit<SessionClaims, "exp"> & { readonly kind: CallKind }): string => {
      const body = Buffer.from(JSON.stringify({ ...claims, exp: now() + TOKEN_TTL_MS })).toString("base64url")
      return `${body}.${mac(body).toString("base64url")}`
    },
    verify: (token: string): Option.Option<SessionClaims> => {
      const [body, signature] = token.split(".")
      if (!body || !signature) return Option.none()
      const expected = mac(body)
      const given = Buffer.from(signature, "base64url")
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return Option.none()
      return decodeClaims(Buffer.from(body, "base64url").toString("utf8")).pipe(Option.filter((claims) => claims.exp > now()))
    }
  } as const
}

export class SessionTokens extends Effect.Service<SessionTokens>()("callgate/SessionTokens", {
  sync: () => makeSessionTokens(randomBytes(32))
}) {}
