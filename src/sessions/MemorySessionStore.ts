import { Duration, Effect, Layer, Option } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import type { Checkpoint } from "../kernel/CallLegs.js"
import type { Session } from "./SessionSchema.js"
import { cursorOf, newestFirst, SessionStore } from "./SessionStore.js"

const PRUNE_EVERY_MS = 60_000

/**
 * The embedded store: one process, nothing survives a restart. Each operation runs synchronously
 * on the event loop, so a read-modify-write cannot interleave with another. Sessions older than
 * the retention are pruned at most once a minute, on insert, and their checkpoints with them.
 * Checkpoints are kept serialized, so what is read back is a copy, as from Redis.
 */
export const makeMemorySessionStore = (retention: Duration.Duration) =>
  Effect.map(Effect.clock, (clock) => {
    const now = () => clock.unsafeCurrentTimeMillis()
    const byAgent = new Map<string, Map<string, Session>>()
    /** instanceId -> "agentId sessionId" */
    const owned = new Map<string, Set<string>>()
    /** "agentId sessionId" -> the latest checkpoint, serialized, and when it was saved. */
    const checkpoints = new Map<string, { readonly json: string; readonly savedAtMs: number }>()
    let lastPrune = now()

    const prune = () => {
      const at = now()
      if (at - lastPrune < PRUNE_EVERY_MS) return
      lastPrune = at
      const oldest = at - Duration.toMillis(retention)
      for (const [agentId, sessions] of byAgent) {
        for (const [id, session] of sessions) {
          if (Date.parse(session.createdAt) >= oldest) continue
          sessions.delete(id)
          checkpoints.delete(`${agentId} ${id}`)
        }
        if (sessions.size === 0) byAgent.delete(agentId)
      }
      // A checkpoint whose record was never written goes at the retention too.
      for (const [member, kept] of checkpoints) {
        const [agentId, sessionId] = member.split(" ") as [string, string]
        if (kept.savedAtMs < oldest && byAgent.get(agentId)?.has(sessionId) !== true) checkpoints.delete(member)
      }
    }

    return SessionStore.of({
      insert: (session) =>
        Effect.sync(() => {
          prune()
          let sessions = byAgent.get(session.agentId)
          if (sessions === undefined) byAgent.set(session.agentId, (sessions = new Map()))
          sessions.set(session.id, session)
          if (session.instanceId !== undefined) {
            let refs = owned.get(session.instanceId)
            if (refs === undefined) owned.set(session.instanceId, (refs = new Set()))
            refs.add(`${session.agentId} ${session.id}`)
          }
        }),
      ownedBy: (instanceId) =>
        Effect.sync(() =>
          [...(owned.get(instanceId) ?? [])].map((member) => {
            const [agentId, sessionId] = member.split(" ") as [string, string]
            return { agentId, sessionId }
          })
        ),
      disown: (instanceId, ref) =>
        Effect.sync(() => {
          const refs = owned.get(instanceId)
          refs?.delete(`${ref.agentId} ${ref.sessionId}`)
          if (refs?.size === 0) owned.delete(instanceId)
        }),
      saveCheckpoint: (agentId, sessionId, checkpoint) =>
        Effect.sync(() => void checkpoints.set(`${agentId} ${sessionId}`, { json: JSON.stringify(checkpoint), savedAtMs: now() })),
      checkpointOf: (agentId, sessionId) =>
        Effect.sync(() => {
          const kept = checkpoints.get(`${agentId} ${sessionId}`)
          return kept === undefined ? Option.none() : Option.some(JSON.parse(kept.json) as Checkpoint)
        }),
      get: (agentId, sessionId) => Effect.sync(() => Option.fromNullable(byAgent.get(agentId)?.get(sessionId))),
      update: (agentId, sessionId, change) =>
        Effect.sync(() => {
          const sessions = byAgent.get(agentId)
          const current = sessions?.get(sessionId)
          if (sessions === undefined || current === undefined) return Option.none()
          const next = change(current)
          sessions.set(sessionId, next)
          return Option.some(next)
        }),
      list: (agentId, options) =>
        Effect.sync(() => {
          const matching = [...(byAgent.get(agentId)?.values() ?? [])]
            .filter(
              (session) =>
                (options.environmentId === undefined || session.environmentId === options.environmentId) &&
                (options.status === undefined || session.status === options.status) &&
                (options.after === undefined || newestFirst(options.after, cursorOf(session)) < 0)
            )
            .sort((a, b) => newestFirst(cursorOf(a), cursorOf(b)))
          const items = matching.slice(0, options.limit)
          const last = items[items.length - 1]
          return {
            items,
            next: matching.length > options.limit && last !== undefined ? Option.some(cursorOf(last)) : Option.none()
          }
        })
    })
  })

export const MemorySessionStoreLive = Layer.effect(
  SessionStore,
  Effect.flatMap(AppConfig, (config) => makeMemorySessionStore(config.sessionRetention))
)
