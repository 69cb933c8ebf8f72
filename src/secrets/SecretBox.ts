import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto"
import { Effect, Option, Redacted } from "effect"
import { AppConfig } from "../config/AppConfig.js"

/** `whsec_` + base64 of 32 random bytes: the form both webhook secrets take (docs/design.md, "Decisions the interface left open"). */
export const generateWebhookSecret = (): string => `whsec_${randomBytes(32).toString("base64")}`

const VERSION = "v1"

/**
 * Seals secrets for storage with AES-256-GCM. A sealed value is `v1.<iv>.<tag>.<ciphertext>`, all
 * base64url, so a store (or anyone reading it) holds no plaintext secret. `associated` binds a
 * ciphertext to its owner (agent/environment/field), so a sealed value copied onto another
 * environment does not open.
 */
export const makeSecretBox = (key: Uint8Array) => {
  if (key.length !== 32) throw new Error("SecretBox needs a 32-byte key")
  const seal = (plaintext: string, associated: string): string => {
    const iv = randomBytes(12)
    const cipher = createCipheriv("aes-256-gcm", key, iv)
    cipher.setAAD(Buffer.from(associated, "utf8"))
    const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()])
    return [VERSION, iv.toString("base64url"), cipher.getAuthTag().toString("base64url"), body.toString("base64url")].join(".")
  }
  const open = (sealed: string, associated: string): string => {
    const [version, iv, tag, body] = sealed.split(".")
    if (version !== VERSION || !iv || !tag || body === undefined) throw new Error("sealed secret has an unknown format")
    const decipher = createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64url"))
    decipher.setAAD(Buffer.from(associated, "utf8"))
    decipher.setAuthTag(Buffer.from(tag, "base64url"))
    return Buffer.concat([decipher.update(Buffer.from(body, "base64url")), decipher.final()]).toString("utf8")
  }
  return { seal, open, generate: generateWebhookSecret } as const
}

export class SecretBox extends Effect.Service<SecretBox>()("callgate/SecretBox", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const key = yield* Option.match(config.secretsKey, {
      onSome: (k) => Effect.succeed(Redacted.value(k)),
      onNone: () =>
        Effect.as(
          Effect.logWarning(
            "SECRETS_KEY is not set: generated a random key for this process; secrets stored in memory will not survive a restart"
          ),
          randomBytes(32)
        )
    })
    return makeSecretBox(key)
  })
}) {}
