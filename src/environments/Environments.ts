import { randomBytes } from "node:crypto"
import { Data, Effect, Either, Option, PubSub } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { SecretBox } from "../secrets/SecretBox.js"
import { applyPatch, associated, last4, type UrlPolicy } from "./EnvironmentPatch.js"
import { EnvironmentStore } from "./EnvironmentStore.js"
import { isoAt } from "../kernel/Time.js"
import { DEFAULT_TELNYX_STREAM_CODEC } from "../kernel/TelnyxStreamCodec.js"
import {
  type CreateEnvironmentBody,
  type EnvironmentView,
  DEFAULT_AGENT_FAILOVER_TIMEOUT,
  DEFAULT_MAX_CONCURRENT_OUTBOUND_CALLS,
  DEFAULT_WEBHOOK_SIGNATURE_SCHEME,
  FALLBACK_DEFAULTS,
  type StoredEnvironment,
  type UpdateEnvironmentBody
} from "./EnvironmentSchema.js"

export class EnvironmentNotFound extends Data.TaggedError("EnvironmentNotFound")<{
  readonly agentId: string
  readonly environmentId: string
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

export class Environments extends Effect.Service<Environments>()("callgate/Environments", {
  scoped: Effect.gen(function* () {
    const clock = yield* Effect.clock
    /** Now, for records: read in the CAS callbacks too, so each attempt is stamped when it is made. */
    const nowIso = () => isoAt(clock.unsafeCurrentTimeMillis())
    const store = yield* EnvironmentStore
    const box = yield* SecretBox
    const config = yield* AppConfig
    const policy: UrlPolicy = {
      agentAllowPrivate: config.agentAllowPrivateNetworks,
      webhookAllowPrivate: config.webhookAllowPrivateNetworks
    }
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
      webhookSignatureScheme: env.webhookSignatureScheme ?? DEFAULT_WEBHOOK_SIGNATURE_SCHEME,
      agentAudioFormat: env.agentAudioFormat ?? "carrier",
      telnyxStreamCodec: env.telnyxStreamCodec ?? DEFAULT_TELNYX_STREAM_CODEC,
      errorFallbackType: env.errorFallbackType,
      errorFallbackValue: env.errorFallbackValue,
      errorFallbackTimeout: env.errorFallbackTimeout,
      errorFallbackOccurrenceThreshold: env.errorFallbackOccurrenceThreshold,
      errorFallbackTimeWindow: env.errorFallbackTimeWindow,
      errorFallbackWebhookSecret: Option.getOrNull(openSecret(env, "errorFallbackWebhookSecret")),
      errorFallbackShedNewCalls: env.errorFallbackShedNewCalls ?? true,
      transferFailedMessage: env.transferFailedMessage ?? null,
      agentUrl: env.agentUrl,
      agentFailoverTimeout: env.agentFailoverTimeout ?? DEFAULT_AGENT_FAILOVER_TIMEOUT,
      maxConcurrentOutboundCalls: env.maxConcurrentOutboundCalls ?? DEFAULT_MAX_CONCURRENT_OUTBOUND_CALLS,
      maxConcurrentCalls: env.maxConcurrentCalls ?? null,
      recording: env.recording ?? "off"
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

    /**
     * Each environment as last read or written here (sealed, as stored): what a live call's rescue
     * falls back on when the store cannot answer (docs/reliability.md, "Partial faults"). Every
     * read and write of the environment refreshes it, a delete drops it.
     */
    const lastKnown = new Map<string, StoredEnvironment>()
    const keyOf = (agentId: string, environmentId: string) => `${agentId} ${environmentId}`

    const getStored = (agentId: string, environmentId: string) =>
      store.get(agentId, environmentId).pipe(
        Effect.flatMap(found(agentId, environmentId)),
        Effect.tap((env) => Effect.sync(() => lastKnown.set(keyOf(agentId, environmentId), env))),
        Effect.tapErrorTag("EnvironmentNotFound", () => Effect.sync(() => lastKnown.delete(keyOf(agentId, environmentId))))
      )

    const create = Effect.fn("Environments.create")(function* (agentId: string, body: CreateEnvironmentBody) {
      const now = nowIso()
      const { generated, next } = yield* applyPatch(blank(agentId, body.name, now), body, box, now, policy)
      yield* store.insert(next)
      return toView(next, generated)
    })

    const update = Effect.fn("Environments.update")(function* (agentId: string, environmentId: string, patch: UpdateEnvironmentBody) {
      let generated: { webhookSecret?: string } = {}
      let webhookRemoved = false
      const updated = yield* store
        .update(agentId, environmentId, (current) =>
          Either.map(applyPatch(current, patch, box, nowIso(), policy), (result) => {
            // The last attempt of the CAS loop is the one that was written.
            generated = result.generated
            webhookRemoved = current.webhookUrl !== null && result.next.webhookUrl === null
            return result.next
          })
        )
        .pipe(Effect.flatMap(found(agentId, environmentId)))
      lastKnown.set(keyOf(agentId, environmentId), updated)
      yield* PubSub.publish(changes, EnvironmentChange.Updated({ agentId, environmentId, webhookRemoved }))
      return toView(updated, generated)
    })

    const rotate = (field: "webhookSecret" | "errorFallbackWebhookSecret") =>
      Effect.fn(`Environments.regenerate.${field}`)(function* (agentId: string, environmentId: string) {
        const secret = box.generate()
        const rotated = yield* store
          .update(agentId, environmentId, (current) =>
            Either.right(
              field === "webhookSecret"
                ? {
                    ...current,
                    updatedAt: nowIso(),
                    webhookSecretSealed: box.seal(secret, associated(current, field)),
                    webhookSecretLast4: last4(secret)
                  }
                : {
                    ...current,
                    updatedAt: nowIso(),
                    errorFallbackWebhookSecretSealed: box.seal(secret, associated(current, field))
                  }
            )
          )
          .pipe(Effect.flatMap(found(agentId, environmentId)))
        lastKnown.set(keyOf(agentId, environmentId), rotated)
        yield* PubSub.publish(changes, EnvironmentChange.Updated({ agentId, environmentId, webhookRemoved: false }))
        return secret
      })

    const clone = Effect.fn("Environments.clone")(function* (agentId: string, environmentId: string, name?: string) {
      const source = yield* getStored(agentId, environmentId)
      const now = nowIso()
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
      lastKnown.delete(keyOf(agentId, environmentId))
      if (!removed) return yield* Effect.fail(new EnvironmentNotFound({ agentId, environmentId }))
      yield* PubSub.publish(changes, EnvironmentChange.Deleted({ agentId, environmentId }))
    })

    return {
      create,
      list: (agentId: string) => Effect.map(store.list(agentId), (envs) => envs.map((env) => toView(env))),
      get: (agentId: string, environmentId: string) => Effect.map(getStored(agentId, environmentId), (env) => toView(env)),
      /**
       * The stored configuration with its secrets still sealed: for code that reads plain settings
       * every turn or call (the breaker, the agent's address), so no view is built and nothing is
       * decrypted for it.
       */
      stored: getStored,
      update,
      remove,
      clone,
      regenerateWebhookSecret: rotate("webhookSecret"),
      regenerateErrorFallbackWebhookSecret: rotate("errorFallbackWebhookSecret"),
      /**
       * The current configuration with secrets opened, read afresh at every use (secrets are never
       * kept open). A store that cannot answer gives the configuration as last read or written on
       * this instance (every live call's start reads it), so a rescue needs nothing but the carrier.
       */
      resolve: (agentId: string, environmentId: string) =>
        Effect.map(
          getStored(agentId, environmentId).pipe(
            Effect.catchTag("StoreError", (error) => {
              const known = lastKnown.get(keyOf(agentId, environmentId))
              return known === undefined ? Effect.fail(error) : Effect.succeed(known)
            })
          ),
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
