import { randomBytes } from "node:crypto"
import { Data, Effect, Either, Option, PubSub } from "effect"
import { SecretBox } from "../secrets/SecretBox.js"
import { EnvironmentStore } from "./EnvironmentStore.js"
import {
  type CreateEnvironmentBody,
  type EnvironmentView,
  FALLBACK_DEFAULTS,
  isE164,
  isHttpsUrl,
  type StoredEnvironment,
  type UpdateEnvironmentBody
} from "./EnvironmentSchema.js"

export class EnvironmentNotFound extends Data.TaggedError("EnvironmentNotFound")<{
  readonly agentId: string
  readonly environmentId: string
}> {}

export interface FieldProblem {
  readonly field: string
  readonly message: string
}

/** A request that is well-formed but breaks a rule spanning several fields. */
export class InvalidEnvironment extends Data.TaggedError("InvalidEnvironment")<{
  readonly details: ReadonlyArray<FieldProblem>
}> {}

/** Published after every committed change, for concerns that react to configuration (the outbox). */
export type EnvironmentChange = Data.TaggedEnum<{
  Updated: { readonly agentId: string; readonly environmentId: string; readonly webhookRemoved: boolean }
  Deleted: { readonly agentId: string; readonly environmentId: string }
}>
export const EnvironmentChange = Data.taggedEnum<EnvironmentChange>()

/** An environment with its secrets opened, for the code that signs requests. Never serialised. */
export interface ResolvedEnvironment {
  readonly stored: StoredEnvironment
  readonly webhookSecret: Option.Option<string>
  readonly errorFallbackWebhookSecret: Option.Option<string>
}

const newEnvironmentId = () => `env_${randomBytes(12).toString("base64url").replace(/[^A-Za-z0-9]/g, "x")}`

export const last4 = (secret: string) => secret.slice(-4)

/** Secrets are sealed bound to their owner and field, so a sealed value moved elsewhere won't open. */
const associated = (env: { agentId: string; id: string }, field: "webhookSecret" | "errorFallbackWebhookSecret") =>
  `${env.agentId}/${env.id}/${field}`

type Patch = UpdateEnvironmentBody

/**
 * Applies a PATCH to an environment: the rules of docs/api.md, "Rules the API enforces". Pure
 * apart from secret generation, whose outputs are returned so the response can show them once.
 */
const applyPatch = (
  current: StoredEnvironment,
  patch: Patch,
  box: { seal: (plain: string, aad: string) => string; generate: () => string },
  now: string
): Either.Either<{ next: StoredEnvironment; generated: { webhookSecret?: string } }, InvalidEnvironment> => {
  const problems: Array<FieldProblem> = []
  const next: { -readonly [K in keyof StoredEnvironment]: StoredEnvironment[K] } = { ...current, updatedAt: now }
  const generated: { webhookSecret?: string } = {}

  if (patch.name !== undefined) next.name = patch.name
  if (patch.agentUrl !== undefined) next.agentUrl = patch.agentUrl

  // Event webhook. Removing the URL removes the webhook, secret included (docs/api.md, "Rules the API enforces").
  if (patch.webhookUrl === null) {
    next.webhookUrl = null
    next.webhookSecretSealed = null
    next.webhookSecretLast4 = null
  } else if (patch.webhookUrl !== undefined) {
    next.webhookUrl = patch.webhookUrl
  }
  if (patch.webhookSecret === null) {
    next.webhookSecretSealed = null
    next.webhookSecretLast4 = null
  }
  if (patch.webhookUrl !== undefined && patch.webhookUrl !== null && next.webhookSecretSealed === null) {
    const secret = box.generate()
    next.webhookSecretSealed = box.seal(secret, associated(current, "webhookSecret"))
    next.webhookSecretLast4 = last4(secret)
    generated.webhookSecret = secret
  }

  // Error fallback.
  const typeChanged = patch.errorFallbackType !== undefined && patch.errorFallbackType !== current.errorFallbackType
  if (patch.errorFallbackType !== undefined) next.errorFallbackType = patch.errorFallbackType
  if (next.errorFallbackType === "disabled") {
    if (patch.errorFallbackValue !== undefined && patch.errorFallbackValue !== null) {
      problems.push({ field: "errorFallbackValue", message: "can only be set when errorFallbackType is phone or webhook" })
    }
    next.errorFallbackValue = null
  } else {
    if (patch.errorFallbackValue !== undefined) next.errorFallbackValue = patch.errorFallbackValue
    else if (typeChanged) next.errorFallbackValue = current.errorFallbackType === "disabled" ? null : current.errorFallbackValue
    const value = next.errorFallbackValue
    if (value === null) {
      problems.push({ field: "errorFallbackValue", message: `is required when errorFallbackType is ${next.errorFallbackType}` })
    } else if (next.errorFallbackType === "phone" && !isE164(value)) {
      problems.push({ field: "errorFallbackValue", message: "must be a phone number in E.164 format, such as +14155550100" })
    } else if (next.errorFallbackType === "webhook" && !isHttpsUrl(value)) {
      problems.push({ field: "errorFallbackValue", message: "must be an https:// URL without credentials" })
    }
  }
  if (patch.errorFallbackTimeout !== undefined) next.errorFallbackTimeout = patch.errorFallbackTimeout
  if (patch.errorFallbackOccurrenceThreshold !== undefined) {
    next.errorFallbackOccurrenceThreshold = patch.errorFallbackOccurrenceThreshold
  }
  if (patch.errorFallbackTimeWindow !== undefined) next.errorFallbackTimeWindow = patch.errorFallbackTimeWindow
  if (patch.errorFallbackWebhookSecret === null) next.errorFallbackWebhookSecretSealed = null
  else if (typeChanged && next.errorFallbackType === "webhook" && next.errorFallbackWebhookSecretSealed === null) {
    // Generated when the type becomes webhook; the value is returned on the environment.
    next.errorFallbackWebhookSecretSealed = box.seal(box.generate(), associated(current, "errorFallbackWebhookSecret"))
  }

  return problems.length > 0 ? Either.left(new InvalidEnvironment({ details: problems })) : Either.right({ next, generated })
}

export class Environments extends Effect.Service<Environments>()("callgate/Environments", {
  scoped: Effect.gen(function* () {
    const store = yield* EnvironmentStore
    const box = yield* SecretBox
    const changes = yield* PubSub.unbounded<EnvironmentChange>()

    const openSecret = (env: StoredEnvironment, field: "webhookSecret" | "errorFallbackWebhookSecret") => {
      const sealed = field === "webhookSecret" ? env.webhookSecretSealed : env.errorFallbackWebhookSecretSealed
      return sealed === null ? Option.none<string>() : Option.some(box.open(sealed, associated(env, field)))
    }

    const toView = (env: StoredEnvironment, generated: { webhookSecret?: string } = {}): EnvironmentView => ({
      id: env.id,
      agentId: env.agentId,
      name: env.name,
      createdAt: env.createdAt,
      updatedAt: env.updatedAt,
      webhookUrl: env.webhookUrl,
      ...(generated.webhookSecret !== undefined ? { webhookSecret: generated.webhookSecret } : {}),
      webhookSecretLast4: env.webhookSecretLast4,
      errorFallbackType: env.errorFallbackType,
      errorFallbackValue: env.errorFallbackValue,
      errorFallbackTimeout: env.errorFallbackTimeout,
      errorFallbackOccurrenceThreshold: env.errorFallbackOccurrenceThreshold,
      errorFallbackTimeWindow: env.errorFallbackTimeWindow,
      errorFallbackWebhookSecret: Option.getOrNull(openSecret(env, "errorFallbackWebhookSecret")),
      agentUrl: env.agentUrl
    })

    const blank = (agentId: string, name: string, now: string): StoredEnvironment => ({
      id: newEnvironmentId(),
      agentId,
      name,
      createdAt: now,
      updatedAt: now,
      version: 1,
      webhookUrl: null,
      webhookSecretSealed: null,
      webhookSecretLast4: null,
      errorFallbackType: "disabled",
      errorFallbackValue: null,
      errorFallbackTimeout: FALLBACK_DEFAULTS.timeout,
      errorFallbackOccurrenceThreshold: FALLBACK_DEFAULTS.threshold,
      errorFallbackTimeWindow: FALLBACK_DEFAULTS.window,
      errorFallbackWebhookSecretSealed: null,
      agentUrl: null
    })

    const found = (agentId: string, environmentId: string) => (result: Option.Option<StoredEnvironment>) =>
      Option.match(result, {
        onNone: () => Effect.fail(new EnvironmentNotFound({ agentId, environmentId })),
        onSome: Effect.succeed
      })

    const getStored = (agentId: string, environmentId: string) =>
      store.get(agentId, environmentId).pipe(Effect.flatMap(found(agentId, environmentId)))

    const create = Effect.fn("Environments.create")(function* (agentId: string, body: CreateEnvironmentBody) {
      const now = new Date().toISOString()
      const { generated, next } = yield* applyPatch(blank(agentId, body.name, now), body, box, now)
      yield* store.insert(next)
      return toView(next, generated)
    })

    const update = Effect.fn("Environments.update")(function* (agentId: string, environmentId: string, patch: Patch) {
      let generated: { webhookSecret?: string } = {}
      let webhookRemoved = false
      const updated = yield* store
        .update(agentId, environmentId, (current) =>
          Either.map(applyPatch(current, patch, box, new Date().toISOString()), (result) => {
            // The last attempt of the CAS loop is the one that was written.
            generated = result.generated
            webhookRemoved = current.webhookUrl !== null && result.next.webhookUrl === null
            return result.next
          })
        )
        .pipe(Effect.flatMap(found(agentId, environmentId)))
      yield* PubSub.publish(changes, EnvironmentChange.Updated({ agentId, environmentId, webhookRemoved }))
      return toView(updated, generated)
    })

    const rotate = (field: "webhookSecret" | "errorFallbackWebhookSecret") =>
      Effect.fn(`Environments.regenerate.${field}`)(function* (agentId: string, environmentId: string) {
        const secret = box.generate()
        yield* store
          .update(agentId, environmentId, (current) =>
            Either.right(
              field === "webhookSecret"
                ? {
                    ...current,
                    updatedAt: new Date().toISOString(),
                    webhookSecretSealed: box.seal(secret, associated(current, field)),
                    webhookSecretLast4: last4(secret)
                  }
                : {
                    ...current,
                    updatedAt: new Date().toISOString(),
                    errorFallbackWebhookSecretSealed: box.seal(secret, associated(current, field))
                  }
            )
          )
          .pipe(Effect.flatMap(found(agentId, environmentId)))
        yield* PubSub.publish(changes, EnvironmentChange.Updated({ agentId, environmentId, webhookRemoved: false }))
        return secret
      })

    const clone = Effect.fn("Environments.clone")(function* (agentId: string, environmentId: string, name?: string) {
      const source = yield* getStored(agentId, environmentId)
      const now = new Date().toISOString()
      // The default name stays within the 200 characters a name may have.
      const fresh = blank(agentId, name ?? `${source.name.slice(0, 193)} (copy)`, now)
      const copy: { -readonly [K in keyof StoredEnvironment]: StoredEnvironment[K] } = {
        ...source,
        id: fresh.id,
        name: fresh.name,
        createdAt: now,
        updatedAt: now,
        version: 1,
        // Secrets are never copied (docs/api.md, "Rules the API enforces"): the clone gets new ones where the source had one.
        webhookSecretSealed: null,
        webhookSecretLast4: null,
        errorFallbackWebhookSecretSealed: null
      }
      let generated: { webhookSecret?: string } = {}
      if (source.webhookSecretSealed !== null) {
        const secret = box.generate()
        copy.webhookSecretSealed = box.seal(secret, associated(copy, "webhookSecret"))
        copy.webhookSecretLast4 = last4(secret)
        generated = { webhookSecret: secret }
      }
      if (source.errorFallbackWebhookSecretSealed !== null) {
        copy.errorFallbackWebhookSecretSealed = box.seal(box.generate(), associated(copy, "errorFallbackWebhookSecret"))
      }
      yield* store.insert(copy)
      return toView(copy, generated)
    })

    const remove = Effect.fn("Environments.remove")(function* (agentId: string, environmentId: string) {
      const removed = yield* store.remove(agentId, environmentId)
      if (!removed) return yield* Effect.fail(new EnvironmentNotFound({ agentId, environmentId }))
      yield* PubSub.publish(changes, EnvironmentChange.Deleted({ agentId, environmentId }))
    })

    return {
      create,
      list: (agentId: string) => Effect.map(store.list(agentId), (envs) => envs.map((env) => toView(env))),
      get: (agentId: string, environmentId: string) => Effect.map(getStored(agentId, environmentId), (env) => toView(env)),
      update,
      remove,
      clone,
      regenerateWebhookSecret: rotate("webhookSecret"),
      regenerateErrorFallbackWebhookSecret: rotate("errorFallbackWebhookSecret"),
      /** The current configuration with secrets opened: read afresh at every use, never cached. */
      resolve: (agentId: string, environmentId: string) =>
        Effect.map(
          getStored(agentId, environmentId),
          (stored): ResolvedEnvironment => ({
            stored,
            webhookSecret: openSecret(stored, "webhookSecret"),
            errorFallbackWebhookSecret: openSecret(stored, "errorFallbackWebhookSecret")
          })
        ),
      /** Every agent that has environments, with how many (GET /v1/agents narrows it to the key's scope). */
      listAgents: store.listAgents,
      changes,
      ping: store.ping
    } as const
  })
}) {}
