import { createHash, randomBytes } from "node:crypto"
import { Clock, Data, Effect, Option, Redacted, Schedule, Schema } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { ResourceId } from "../environments/EnvironmentSchema.js"
import { ApiKeyStore, type StoredApiKey } from "./ApiKeyStore.js"
import { constantTimeEqual } from "../secrets/ConstantTime.js"
import { isoAt } from "../kernel/Time.js"

/** Who is calling: the operator's admin key, or a key limited to some agents. */
export type Principal =
  | { readonly kind: "admin" }
  | { readonly kind: "scoped"; readonly keyId: string; readonly agentIds: ReadonlyArray<string> }

export const mayActFor = (principal: Principal, agentId: string): boolean =>
  principal.kind === "admin" || principal.agentIds.includes(agentId)

/** An ISO 8601 date-time in the future, e.g. 2027-01-31T00:00:00Z. */
const FutureDateTime = Schema.String.pipe(
  Schema.filter((text) => (Number.isNaN(Date.parse(text)) ? "must be an ISO 8601 date-time such as 2027-01-31T00:00:00Z" : undefined)),
  // In the future by the Clock (TestClock in tests), so the check is an effect.
  Schema.filterEffect((text) => Effect.map(Clock.currentTimeMillis, (now) => (Date.parse(text) > now ? true : "must be in the future")))
)

export const CreateApiKeyBody = Schema.Struct({
  name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)),
  agentIds: Schema.Array(ResourceId).pipe(Schema.minItems(1), Schema.maxItems(1000)),
  expiresAt: Schema.optional(FutureDateTime).annotations({ description: "ISO 8601; the key is refused from then on. Default: never expires" })
}).annotations({ identifier: "CreateApiKey", message: () => "must be a JSON object" })

export const RotateApiKeyBody = Schema.Struct({
  graceSeconds: Schema.optional(
    Schema.Number.pipe(Schema.int(), Schema.between(0, 30 * 86_400, { message: () => "must be an integer from 0 to 2592000 (30 days)" }))
  ).annotations({ description: "How long the old key keeps working beside the new one, in seconds (default 0: it stops at once)" })
}).annotations({ identifier: "RotateApiKey", message: () => "must be a JSON object" })

export const ApiKeyIdParams = Schema.Struct({ keyId: ResourceId })

/** A key as listed: never the key, never its hash. */
export const ApiKeyInfoView = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  agentIds: Schema.Array(Schema.String),
  createdAt: Schema.String,
  expiresAt: Schema.NullOr(Schema.String),
  lastUsedAt: Schema.NullOr(Schema.String).annotations({ description: "When it last authenticated a request (updated at most once a minute); null: never" }),
  previousKeyValidUntil: Schema.NullOr(Schema.String).annotations({ description: "After a rotation with a grace period: until when the old key still works" })
}).annotations({ identifier: "ApiKeyInfo" })

export const ApiKeyView = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  agentIds: Schema.Array(Schema.String),
  createdAt: Schema.String,
  expiresAt: Schema.NullOr(Schema.String),
  key: Schema.String.annotations({ description: "Shown only in this response; callgate stores its SHA-256 hash" })
}).annotations({ identifier: "ApiKey" })

export class ApiKeyNotFound extends Data.TaggedError("ApiKeyNotFound")<{ readonly keyId: string }> {}

const sha256 = (text: string) => createHash("sha256").update(text, "utf8").digest()
const newKey = () => `cgk_${randomBytes(32).toString("base64url")}`

/** Last use is written at most this often per key and instance: authentication stays one read. */
const TOUCH_EVERY_MS = 60_000

const infoOf = (key: StoredApiKey, lastUsedAt: string | null, now: number): typeof ApiKeyInfoView.Type => ({
  id: key.id,
  name: key.name,
  agentIds: key.agentIds,
  createdAt: key.createdAt,
  expiresAt: key.expiresAt ?? null,
  lastUsedAt,
  previousKeyValidUntil: key.previous && Date.parse(key.previous.until) > now ? key.previous.until : null
})

/**
 * The admin key and scoped keys (docs/api.md, "API keys"): create, list, revoke, rotate,
 * authenticate. Revocations reach `onRevoked` listeners on every instance (the agent WebSocket
 * closes that key's sockets).
 */
export class ApiKeys extends Effect.Service<ApiKeys>()("callgate/ApiKeys", {
  scoped: Effect.gen(function* () {
    const store = yield* ApiKeyStore
    const config = yield* AppConfig
    const adminDigest = sha256(Redacted.value(config.adminApiKey))
    const touchedAt = new Map<string, number>()
    const revocationListeners = new Set<(keyId: string) => void>()
    const announce = (keyId: string) => {
      touchedAt.delete(keyId)
      for (const listener of revocationListeners) listener(keyId)
    }
    // Hear revocations from every instance; an unreachable store at start-up is retried quietly.
    yield* store.subscribeRevocations(announce).pipe(
      Effect.retry(Schedule.spaced("1 second")),
      Effect.forkScoped
    )

    const touch = (keyId: string, now: number) => {
      const last = touchedAt.get(keyId)
      if (last !== undefined && now - last < TOUCH_EVERY_MS) return Effect.void
      touchedAt.set(keyId, now)
      return store.touch(keyId, isoAt(now)).pipe(Effect.ignore)
    }

    return {
      create: Effect.fn("ApiKeys.create")(function* (body: typeof CreateApiKeyBody.Type) {
        const key = newKey()
        const stored: StoredApiKey = {
          id: `key_${randomBytes(9).toString("base64url")}`,
          name: body.name,
          keyHash: sha256(key).toString("hex"),
          agentIds: [...new Set(body.agentIds)],
          createdAt: isoAt(yield* Clock.currentTimeMillis),
          ...(body.expiresAt !== undefined ? { expiresAt: isoAt(Date.parse(body.expiresAt)) } : {})
        }
        yield* store.insert(stored)
        return { id: stored.id, name: stored.name, agentIds: stored.agentIds, createdAt: stored.createdAt, expiresAt: stored.expiresAt ?? null, key }
      }),
      list: Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const listed = yield* store.list
        return listed
          .map(({ key, lastUsedAt }) => infoOf(key, lastUsedAt, now))
          .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id))
      }),
      /** Deletes the key: refused from now on by every instance, and its open agent sockets are closed. */
      revoke: Effect.fn("ApiKeys.revoke")(function* (keyId: string) {
        const removed = yield* store.remove(keyId)
        if (Option.isNone(removed)) return yield* Effect.fail(new ApiKeyNotFound({ keyId }))
        // The memory store tells this process's listeners itself; Redis tells every instance over pub/sub.
      }),
      /** A new key for the same id, name and agents; the old one keeps working for `graceSeconds` (default 0). */
      rotate: Effect.fn("ApiKeys.rotate")(function* (keyId: string, body: typeof RotateApiKeyBody.Type) {
        const now = yield* Clock.currentTimeMillis
        const existing = yield* store.get(keyId)
        if (Option.isNone(existing)) return yield* Effect.fail(new ApiKeyNotFound({ keyId }))
        const key = newKey()
        const grace = body.graceSeconds ?? 0
        const previous = grace > 0 ? { keyHash: existing.value.keyHash, until: isoAt(now + grace * 1000) } : undefined
        const rotated = yield* store.replaceHash(keyId, sha256(key).toString("hex"), previous)
        if (Option.isNone(rotated)) return yield* Effect.fail(new ApiKeyNotFound({ keyId }))
        const r = rotated.value
        return {
          ...{ id: r.id, name: r.name, agentIds: r.agentIds, createdAt: r.createdAt, expiresAt: r.expiresAt ?? null, key },
          previousKeyValidUntil: previous?.until ?? null
        }
      }),
      /** Calls `listener(keyId)` for each key revoked on any instance; returns the unsubscribe. */
      onRevoked: (listener: (keyId: string) => void): (() => void) => {
        revocationListeners.add(listener)
        return () => void revocationListeners.delete(listener)
      },
      /**
       * Keys are compared as SHA-256 digests: the admin digest in constant time, scoped keys by
       * looking the digest up, so no comparison leaks how much of a guess was right. An expired
       * key, or a rotated key past its grace, is refused.
       */
      authenticate: (presented: string) => {
        const digest = sha256(presented)
        if (constantTimeEqual(digest, adminDigest)) return Effect.succeed(Option.some<Principal>({ kind: "admin" }))
        const hash = digest.toString("hex")
        return Effect.gen(function* () {
          const found = yield* store.findByHash(hash)
          if (Option.isNone(found)) return Option.none<Principal>()
          const key = found.value
          const now = yield* Clock.currentTimeMillis
          const current = key.keyHash === hash
          const inGrace = !current && key.previous?.keyHash === hash && Date.parse(key.previous.until) > now
          if (!current && !inGrace) return Option.none<Principal>()
          if (key.expiresAt !== undefined && Date.parse(key.expiresAt) <= now) return Option.none<Principal>()
          yield* touch(key.id, now)
          return Option.some<Principal>({ kind: "scoped", keyId: key.id, agentIds: key.agentIds })
        })
      }
    } as const
  })
}) {}
