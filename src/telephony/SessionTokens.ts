import { createHmac, hkdfSync, randomBytes } from "node:crypto"
import { Effect, Option, Redacted, Schema } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import type { CallKind } from "../kernel/Carrier.js"
import { constantTimeEqual } from "../secrets/ConstantTime.js"

/**
 * Short-lived tokens that callgate's call entry endpoints hand to the carrier (as a stream
 * <Parameter>, a stream URL query parameter or a Telnyx stream_auth_token), and that every media
 * stream must present before any agent hears it. HMAC-SHA256 over the claims; they expire after
 * `TOKEN_TTL_MS` (a carrier opens the stream within seconds). The key is derived from SECRETS_KEY
 * (HKDF-SHA256, its own label), so every instance of a fleet verifies every other's tokens and a
 * restart invalidates none (docs/scaling.md, "Session tokens"); without SECRETS_KEY (the embedded
 * single-instance mode) it is random per process. Each token carries a random id (`jti`): the
 * first stream that presents it spends it (SpentTokenStore), any later one is refused.
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
  /** The entry URL's extra query parameters, for the agent's `start.customParameters` (EntryWire.entryCustomParameters). */
  customParameters: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String })),
  /** An outbound call callgate placed: the session it opens (see LiveCalls.expectOutbound). */
  sessionId: Schema.optional(Schema.String),
  /** The instance placement chose for the stream (docs/scaling.md, "Placement"). */
  placedOn: Schema.optional(Schema.String),
  /** The dial-in agent socket placement reserved; absent on a placed call: none anywhere. */
  agentSocket: Schema.optional(Schema.String),
  /** A live session moved here by an agent failover (docs/design.md, "The path of a failover"): the stream resumes it. */
  resumed: Schema.optional(
    Schema.Struct({
      failover: Schema.Number,
      previousEndReason: Schema.String,
      lostAt: Schema.Number,
      createdAt: Schema.Number,
      /** The caller came back from an agent's transfer that was not answered (docs/fallback.md, "The return path"). */
      transfer: Schema.optional(Schema.Struct({ to: Schema.String, status: Schema.String })),
      /** The call's recording was paused when it moved: the next stream's recording starts paused. */
      recordingPaused: Schema.optional(Schema.Boolean)
    })
  ),
  /**
   * The environment's `recording` as the entry read it when it admitted the call: the stream's
   * recorder decides from it at once, with no store read and nothing kept for a call not recorded.
   */
  recording: Schema.optional(Schema.Literal("on", "off")),
  /** The token's own random id, spent by the first stream that presents it. */
  jti: Schema.String,
  /** Expiry, Unix milliseconds. */
  exp: Schema.Number
})
export type SessionClaims = typeof SessionClaims.Type

export const TOKEN_TTL_MS = 5 * 60 * 1000

const decodeClaims = Schema.decodeUnknownOption(Schema.parseJson(SessionClaims))

/** `now`: epoch milliseconds, from the service's Clock (docs/design.md, "One clock"). */
export const makeSessionTokens = (key: Uint8Array, now: () => number) => {
  const mac = (body: string) => createHmac("sha256", key).update(body).digest()
  return {
    issue: (claims: Omit<SessionClaims, "exp" | "jti"> & { readonly kind: CallKind }): string => {
      const full = { ...claims, jti: randomBytes(12).toString("base64url"), exp: now() + TOKEN_TTL_MS }
      const body = Buffer.from(JSON.stringify(full)).toString("base64url")
      return `${body}.${mac(body).toString("base64url")}`
    },
    verify: (token: string): Option.Option<SessionClaims> => {
      const [body, signature] = token.split(".")
      if (!body || !signature) return Option.none()
      const expected = mac(body)
      const given = Buffer.from(signature, "base64url")
      if (!constantTimeEqual(given, expected)) return Option.none()
      return decodeClaims(Buffer.from(body, "base64url").toString("utf8")).pipe(Option.filter((claims) => claims.exp > now()))
    },
    /**
     * The id (`jti`) of a token callgate issued, expired or not: how a Call Control stream is named
     * (SessionInfo.streamRef) when Telnyx reports its end by its `stream_url`, long after the token
     * was spent. None for anything callgate did not sign.
     */
    referenceOf: (token: string): Option.Option<string> => {
      const [body, signature] = token.split(".")
      if (!body || !signature) return Option.none()
      if (!constantTimeEqual(Buffer.from(signature, "base64url"), mac(body))) return Option.none()
      return decodeClaims(Buffer.from(body, "base64url").toString("utf8")).pipe(Option.map((claims) => claims.jti))
    }
  } as const
}

/** The label that makes the token key independent of every other key derived from SECRETS_KEY. */
export const SESSION_TOKEN_KEY_LABEL = "callgate session tokens v1"

/** The token key: HKDF-SHA256 of SECRETS_KEY with its own label. */
export const sessionTokenKey = (secretsKey: Uint8Array): Uint8Array =>
  new Uint8Array(hkdfSync("sha256", secretsKey, Buffer.alloc(0), SESSION_TOKEN_KEY_LABEL, 32))

export class SessionTokens extends Effect.Service<SessionTokens>()("callgate/SessionTokens", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const clock = yield* Effect.clock
    return makeSessionTokens(
      Option.match(config.secretsKey, {
        onNone: () => randomBytes(32),
        onSome: (key) => sessionTokenKey(Redacted.value(key))
      }),
      () => clock.unsafeCurrentTimeMillis()
    )
  })
}) {}
