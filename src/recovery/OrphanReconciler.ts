import { withCallSpan } from "../observability/Tracing.js"
import { Effect, Option } from "effect"
import type { CallKind, CarrierShape } from "../kernel/Carrier.js"
import { HardError } from "../kernel/HardError.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"
import type { StoreError } from "../kernel/StoreError.js"
import { ErrorFallback } from "../fallback/ErrorFallback.js"
import { InstanceIdentity } from "../config/InstanceIdentity.js"
import { SessionFencing } from "../kernel/SessionFencing.js"
import { SessionEndJournal } from "../sessions/SessionEndJournal.js"
import { isOpenStatus, type Session } from "../sessions/SessionSchema.js"
import type { SessionRef } from "../sessions/SessionStore.js"
import { Sessions } from "../sessions/Sessions.js"
import { TransferOutcomes } from "../sessions/TransferOutcomes.js"
import { dateAt, nowIso } from "../kernel/Time.js"

export const INSTANCE_LOST_MESSAGE = "The callgate instance serving the call stopped before the call ended."

/** What one reconciliation did. */
export interface ReconcileReport {
  /** Active sessions this reconciliation claimed, rescued and ended `failed` / `instance_lost`. */
  readonly rescued: number
  /** Sessions already ended whose session.ended was queued again (idempotent) and let go of. */
  readonly finished: number
  /** Sessions left alone: claimed by someone else first, too new, on their way through this instance's journal, or held by another instance now. */
  readonly skipped: number
  /**
   * Sessions ended with a transfer still pending (its outcome not come yet): this instance now
   * watches it and closes it at the transfer's bound unless the carrier reports first
   * (docs/fallback.md, "When the outcome never comes"), or re-opened sessions whose caller was
   * not back yet, whose return deadline it now keeps.
   */
  readonly watched: number
}

export interface ReconcileOptions {
  /** Only sessions created before this (a restarted instance's own previous run). */
  readonly createdBefore?: Date | undefined
}

/** Enough to reach a stored session's call through its carrier's REST API. */
export const sessionInfoOf = (session: Session): SessionInfo => ({
  sessionId: session.id,
  agentId: session.agentId,
  environmentId: session.environmentId,
  provider: session.provider,
  call: {
    kind: session.callKind ?? ((session.provider === "twilio" ? "twilio" : "telnyx-call-control") satisfies CallKind),
    callId: session.callId,
    accountSid: session.accountSid
  },
  from: session.from,
  to: session.to,
  direction: session.direction,
  streamSid: "",
  createdAt: dateAt(Date.parse(session.createdAt))
})

/**
 * Rescues the sessions an instance left behind (docs/reliability.md, "Instance loss"): every
 * session the instance still owns in the store is either still active, and then claimed (exactly
 * once: one compare-and-set moves it from active to failed / instance_lost, and only the writer
 * that made that move goes on), rescued through the carrier's REST API with the environment's
 * error fallback and its session.ended queued; or already ended, and then its session.ended is
 * queued again (the outbox keeps one per session) and the session let go of.
 *
 * A restarted instance calls it for its own id at start; the fleet's registry calls it for an
 * instance that went silent. Any number of callers may race on one instance.
 */
export class OrphanReconciler extends Effect.Service<OrphanReconciler>()("callgate/OrphanReconciler", {
  effect: Effect.gen(function* () {
    const sessions = yield* Sessions
    const fallback = yield* ErrorFallback
    const journal = yield* SessionEndJournal
    const fencing = yield* SessionFencing
    const outcomes = yield* TransferOutcomes
    const { instanceId } = yield* InstanceIdentity

    /**
     * Ends the session as lost if it is still active (and created before `createdBefore`): one
     * compare-and-set, so of any number of claimants exactly one gets the record back. `still`: a
     * further condition on the record as the compare-and-set reads it (AfterStream: the stopped
     * stream is still the session's).
     */
    const claim = (ref: SessionRef, createdBefore = Infinity, still: (current: Session) => boolean = () => true) =>
      Effect.gen(function* () {
        const endedAt = yield* nowIso
        let won = false
        const result = yield* sessions.update(ref.agentId, ref.sessionId, (current) => {
          won = isOpenStatus(current.status) && Date.parse(current.createdAt) < createdBefore && still(current)
          return won ? { ...current, status: "failed" as const, endReason: "instance_lost" as const, endedAt } : current
        })
        if (!won) return Option.none<Session>()
        // The owner, if it is only paused or cut off from the store, stops serving it when it reads this.
        const owner = Option.getOrUndefined(result)?.instanceId
        if (owner !== undefined && owner !== instanceId) yield* fencing.noteTaken(owner, ref).pipe(Effect.ignore)
        return result
      })

    /**
     * Rescues the call of a session this instance claimed (through `carrier`: the carriers' REST
     * APIs unless given) and carries its end, with the fallback's record, into the store.
     */
    const rescueClaimed = (claimed: Session, carrier?: CarrierShape) =>
      Effect.gen(function* () {
        const info = sessionInfoOf(claimed)
        const error = new HardError({ kind: "instance_lost", message: INSTANCE_LOST_MESSAGE })
        yield* Effect.logWarning("rescuing a session its instance left active", { instanceId: claimed.instanceId, callId: info.call.callId })
        const outcome = yield* carrier === undefined ? fallback.rescue(info, error) : fallback.rescueWith(info, error, carrier)
        yield* journal.submit({ session: { ...claimed, fallback: outcome.fallback ?? null }, fillFallback: true })
      })

    const reconcileOne = (instanceId: string, ref: SessionRef, createdBefore: number) =>
      Effect.gen(function* () {
        if (journal.isPending(ref.sessionId)) return "skipped" as const
        const found = yield* sessions.get(ref.agentId, ref.sessionId).pipe(
          Effect.map(Option.some),
          Effect.catchTag("SessionNotFound", () => Effect.succeed(Option.none<Session>()))
        )
        if (Option.isNone(found)) {
          // Owned but never written (the instance stopped between the two writes), or expired.
          if (createdBefore !== Infinity) return "skipped" as const
          yield* sessions.disown(instanceId, ref)
          return "finished" as const
        }
        const session = found.value
        // Moved to another instance since (a failover, or the caller back from a transfer): not this one's.
        if (session.instanceId !== undefined && session.instanceId !== instanceId) {
          yield* sessions.disown(instanceId, ref)
          return "skipped" as const
        }
        if (!isOpenStatus(session.status)) {
          // Its transfer's outcome is still to come: whoever comes first, the carrier's report or this watch, ends it.
          if (session.pendingTransfer !== undefined) {
            yield* outcomes.watchLeft(ref, session.pendingTransfer)
            return "watched" as const
          }
          yield* journal.submit({ session })
          return "finished" as const
        }
        // Re-opened for a caller back from a failed transfer whose stream has not opened: no live
        // call to rescue yet; the return path's deadline is kept here (the stream may still come).
        if (session.status === "active" && session.awaitingStreamUntil !== undefined) {
          yield* outcomes.awaitReturnLeft(ref, session.awaitingStreamUntil)
          return "watched" as const
        }
        const claimed = yield* claim(ref, createdBefore)
        if (Option.isNone(claimed)) return "skipped" as const
        yield* rescueClaimed(claimed.value)
        // A transfer it left ringing: its outcome (or the bound) still decides the one session.ended.
        if (claimed.value.pendingTransfer !== undefined) yield* outcomes.watchLeft(ref, claimed.value.pendingTransfer)
        return "rescued" as const
      }).pipe(
        Effect.annotateLogs({ sessionId: ref.sessionId, agentId: ref.agentId }),
        withCallSpan(ref.sessionId, "callgate.orphan_reconcile", { attributes: { "callgate.session.id": ref.sessionId } })
      )

    /** Claims, rescues and ends every session `instanceId` left; fails only when the store cannot be read. */
    const reconcileOrphans = (instanceId: string, options: ReconcileOptions = {}): Effect.Effect<ReconcileReport, StoreError> =>
      Effect.gen(function* () {
        const createdBefore = options.createdBefore?.getTime() ?? Infinity
        const refs = yield* sessions.ownedBy(instanceId)
        const outcomes = yield* Effect.forEach(refs, (ref) => reconcileOne(instanceId, ref, createdBefore), { concurrency: 16 })
        const count = (what: string) => outcomes.filter((outcome) => outcome === what).length
        return { rescued: count("rescued"), finished: count("finished"), skipped: count("skipped"), watched: count("watched") }
      })

    return { reconcileOrphans, claim, rescueClaimed } as const
  })
}) {}
