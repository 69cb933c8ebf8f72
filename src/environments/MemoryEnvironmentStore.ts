import { Effect, Either, Layer, Option } from "effect"
import type { StoredEnvironment } from "./EnvironmentSchema.js"
import { EnvironmentStore } from "./EnvironmentStore.js"
import { environmentKey } from "../kernel/EnvironmentKey.js"


/**
 * The embedded store: one process, nothing survives a restart. Each operation runs synchronously
 * on the event loop, so a read-modify-write cannot interleave with another.
 */
export const makeMemoryEnvironmentStore = Effect.sync(() => {
  const records = new Map<string, StoredEnvironment>()
  return EnvironmentStore.of({
    insert: (environment) => Effect.sync(() => void records.set(environmentKey(environment.agentId, environment.id), environment)),
    get: (agentId, environmentId) => Effect.sync(() => Option.fromNullable(records.get(environmentKey(agentId, environmentId)))),
    list: (agentId) =>
      Effect.sync(() =>
        [...records.values()]
          .filter((env) => env.agentId === agentId)
          .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id))
      ),
    update: (agentId, environmentId, change) =>
      Effect.suspend(() => {
        const key = environmentKey(agentId, environmentId)
        const current = records.get(key)
        if (current === undefined) return Effect.succeed(Option.none())
        return Either.match(change(current), {
          onLeft: Effect.fail,
          onRight: (next) => {
            const stored = { ...next, version: current.version + 1 }
            records.set(key, stored)
            return Effect.succeed(Option.some(stored))
          }
        })
      }),
    remove: (agentId, environmentId) => Effect.sync(() => records.delete(environmentKey(agentId, environmentId))),
    listAgents: Effect.sync(() => {
      const counts = new Map<string, number>()
      for (const env of records.values()) counts.set(env.agentId, (counts.get(env.agentId) ?? 0) + 1)
      return [...counts]
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([agentId, environments]) => ({ agentId, environments }))
    }),
    ping: Effect.void
  })
})

export const MemoryEnvironmentStoreLive = Layer.effect(EnvironmentStore, makeMemoryEnvironmentStore)
