import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import { Effect, Option, Redacted, Schema } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { ResourceId } from "../environments/EnvironmentSchema.js"
import { ApiKeyStore } from "./ApiKeyStore.js"

/** Who is calling: the operator's admin key, or a key limited to some agents. */
export type Principal =
  | { readonly kind: "admin" }
  | { readonly kind: "scoped"; readonly keyId: string; readonly agentIds: ReadonlyArray<string> }

export const mayActFor = (principal: Principal, agentId: string): boolean =>
  principal.kind === "admin" || principal.agentIds.includes(agentId)

export const CreateApiKeyBody = Schema.Struct({
  name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)),
  agentIds: Schema.Array(ResourceId).pipe(Schema.minItems(1), Schema.maxItems(1000))
}).annotations({ identifier: "CreateApiKey", message: () => "must be a JSON object" })

export const ApiKeyView = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  agentIds: Schema.Array(Schema.String),
  createdAt: Schema.String,
  key: Schema.String.annotations({ description: "Shown only in this response; callgate stores its SHA-256 hash" })
}).annotations({ identifier: "ApiKey" })

const sha256 = (text: string) => createHash("sha256").update(text, "utf8").digest()

export class ApiKeys extends Effect.Service<ApiKeys>()("callgate/ApiKeys", {
  effect: Effect.gen(function* () {
    const store = yield* ApiKeyStore
    const config = yield* AppConfig
    const adminDigest = sha256(Redacted.value(config.adminApiKey))

    return {
      create: Effect.fn("ApiKeys.create")(function* (body: typeof CreateApiKeyBody.Type) {
        const key = `cgk_${randomBytes(32).toString("base64url")}`
        const stored = {
          id: `key_${randomBytes(9).toString("base64url")}`,
          name: body.name,
          keyHash: sha256(key).toString("hex"),
          agentIds: [...new Set(body.agentIds)],
          createdAt: new Date().toISOString()
        }
        yield* store.insert(stored)
        return { id: stored.id, name: stored.name, agentIds: stored.agentIds, createdAt: stored.createdAt, key }
      }),
      /**
       * Keys are compared as SHA-256 digests: the admin digest with timingSafeEqual, scoped keys by
       * looking the digest up, so no comparison leaks how much of a guess was right.
       */
      authenticate: (presented: string) => {
        const digest = sha256(presented)
        if (timingSafeEqual(digest, adminDigest)) return Effect.succeed(Option.some<Principal>({ kind: "admin" }))
        return store
          .findByHash(digest.toString("hex"))
          .pipe(Effect.map(Option.map((key): Principal => ({ kind: "scoped", keyId: key.id, agentIds: key.agentIds }))))
      }
    } as const
  })
}) {}
