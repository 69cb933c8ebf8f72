import { Effect, Layer, Option } from "effect"
import { environmentKey } from "../kernel/EnvironmentKey.js"
import { type InstanceEntry, type InstanceReport, InstanceStore } from "./InstanceStore.js"
import { isoAt } from "../kernel/Time.js"


interface EnvironmentAgents {
  /** socket id -> instance id */
  readonly idle: Map<string, string>
  /** instance id -> when it last published this environment */
  readonly seen: Map<string, number>
  /** socket id -> when its hold lapses */
  readonly held: Map<string, number>
}

/** A silent instance's entry is kept this many gone-after periods, like the Redis registry's. */
const SILENT_KEPT_FACTOR = 6

/**
 * The embedded store's registry: one process, so one instance; the same rules as the Redis
 * adapter, each operation synchronous on the event loop (so atomic).
 */
export const makeMemoryInstanceStore =
  Effect.map(Effect.clock, (clock) => {
    const now = () => clock.unsafeCurrentTimeMillis()
    const instances = new Map<string, { report: InstanceReport; seenAt: number }>()
    const environments = new Map<string, EnvironmentAgents>()

    const environment = (agentId: string, environmentId: string) => {
      const key = environmentKey(agentId, environmentId)
      let env = environments.get(key)
      if (env === undefined) environments.set(key, (env = { idle: new Map(), seen: new Map(), held: new Map() }))
      return env
    }

    return InstanceStore.of({
      report: (report) =>
        Effect.sync(() => {
          instances.set(report.id, { report, seenAt: now() })
        }),
      publishIdle: (instanceId, { agentId, environmentId, sockets }) =>
        Effect.sync(() => {
          const env = environment(agentId, environmentId)
          for (const [socket, owner] of env.idle) if (owner === instanceId) env.idle.delete(socket)
          for (const socket of sockets) env.idle.set(socket, instanceId)
          env.seen.set(instanceId, now())
        }),
      list: (goneAfterMs) =>
        Effect.sync(() => {
          const at = now()
          const live: Array<InstanceEntry> = []
          for (const [id, { report, seenAt }] of instances) {
            // Silent ones are kept a while for `silent` (as the Redis registry keeps them), then pruned.
            if (at - seenAt > goneAfterMs * SILENT_KEPT_FACTOR) instances.delete(id)
            else if (at - seenAt <= goneAfterMs) live.push({ ...report, lastSeenAt: isoAt(seenAt) })
          }
          return live.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
        }),
      silent: (goneAfterMs) =>
        Effect.sync(() => {
          const at = now()
          return [...instances].filter(([, { seenAt }]) => at - seenAt > goneAfterMs).map(([id]) => id).sort()
        }),
      reserve: (agentId, environmentId, preferred, holdMs, goneAfterMs, avoid = "") =>
        Effect.sync(() => {
          const env = environments.get(environmentKey(agentId, environmentId))
          if (env === undefined) return Option.none()
          const at = now()
          for (const [socket, until] of env.held) if (until <= at) env.held.delete(socket)
          const free = new Map<string, Array<string>>()
          for (const [socket, owner] of env.idle) {
            const seen = env.seen.get(owner)
            if (owner === avoid || seen === undefined || at - seen > goneAfterMs || env.held.has(socket)) continue
            let list = free.get(owner)
            if (list === undefined) free.set(owner, (list = []))
            list.push(socket)
          }
          let chosen = free.has(preferred) ? preferred : undefined
          if (chosen === undefined) {
            let most = 0
            for (const [owner, sockets] of free) {
              if (sockets.length > most || (sockets.length === most && chosen !== undefined && owner < chosen)) {
                most = sockets.length
                chosen = owner
              }
            }
          }
          if (chosen === undefined) return Option.none()
          const socketId = free.get(chosen)![0]!
          env.held.set(socketId, at + holdMs)
          return Option.some({ instanceId: chosen, socketId })
        }),
      withdraw: (instanceId, envs) =>
        Effect.sync(() => {
          instances.delete(instanceId)
          for (const { agentId, environmentId } of envs) {
            const env = environments.get(environmentKey(agentId, environmentId))
            if (env === undefined) continue
            for (const [socket, owner] of env.idle) if (owner === instanceId) env.idle.delete(socket)
            env.seen.delete(instanceId)
          }
        })
    })
  })

export const MemoryInstanceStoreLive = Layer.effect(InstanceStore, makeMemoryInstanceStore)
