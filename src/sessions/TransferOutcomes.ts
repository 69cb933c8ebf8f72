import { Clock, Duration, Effect, FiberMap, Option } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { PublicUrl } from "../config/PublicUrl.js"
import type { TransferTracking } from "../kernel/Carrier.js"
import { EntryPaths } from "../kernel/EntryPaths.js"
import { type StoreError, storeRetry } from "../kernel/StoreError.js"
import { isoAt } from "../kernel/Time.js"
import { counterOn, Metrics } from "../observability/Metrics.js"
import { Outbox } from "../webhooks/Outbox.js"
import type { TransferRecord } from "../webhooks/SessionEndedEvent.js"
import { isOpenStatus, type PendingTransfer, type Session } from "./SessionSchema.js"
import { sessionEndedEvent, Sessions } from "./Sessions.js"

/** The carriers' bounds on a transfer's ring timeout (Twilio `<Dial timeout>`, Telnyx `timeout_secs`). */
const MIN_RING_SECONDS = 5
const MAX_RING_SECONDS = 600

/**
 * How long past its bound a transfer waits for the carrier's word before callgate closes it
 * itself (docs/fallback.md, "When the outcome never comes"): the carriers post the outcome right
 * at the ring timeout or the hang-up; this covers their retries.
 */
export const TRANSFER_OUTCOME_GRACE = Duration.seconds(10)

/** How long past its stream token's expiry a caller on the return path may take to be back: a stream verified just before the expiry still adopts the session. */
export const RETURN_STREAM_GRACE = Duration.seconds(10)

export type TransferStatus = TransferRecord["status"]

/** The endReason of a session whose caller never came back on the stream of the return path (docs/fallback.md, "The return path"). */
export const RETURN_STREAM_TIMEOUT = "return_stream_timeout"

export interface TransferRef {
  readonly agentId: string
  readonly sessionId: string
}

/** What the carrier said of a transfer's end. */
export interface ReportedOutcome {
  readonly status: TransferStatus
  /** The carrier's own word (DialCallStatus, hangup_cause). */
  readonly carrierStatus: string | null
  /** Talk time the carrier counted (Twilio DialCallDuration), used when callgate saw no answer report. */
  readonly talkMsHint?: number | undefined
  /** The leg's end says nothing of an answer (Telnyx call.hangup): answered when an answer was reported before. */
  readonly answeredWhenReported?: boolean | undefined
  /** No report came: callgate closes the transfer at its bound, and the caller is told nothing. */
  readonly unreported?: boolean | undefined
}

/** A transfer's outcome once known, and what the caller is to hear after it. */
export interface SettledTransfer {
  readonly transfer: TransferRecord
  /** Said to the caller before the hang-up: a failed fallback transfer's transferFailedMessage. */
  readonly sayBeforeHangup: string | null
  /** The session as stored after the outcome. */
  readonly session: Session
  /**
   * The agent's transfer was not answered and the caller is back with callgate (docs/fallback.md,
   * "The return path"): the session was re-opened (active) by the same write and no session.ended
   * was queued; whoever reopened it puts the caller on an agent or runs the error fallback.
   */
  readonly reopened: boolean
}

/** A transfer status the caller comes back from: the number never answered. */
export const notAnswered = (status: TransferStatus): boolean => status === "busy" || status === "no-answer" || status === "failed"

/**
 * Transfer outcomes (docs/fallback.md, "Transfer outcomes"). A transfer is written on its session
 * as `pendingTransfer` before the carrier is asked (`begin`), so the carrier's report, which may
 * come back at once and to any instance, always finds it. The report (`progress`, `settle`) moves
 * it into `transfers` with one conditional write; whichever write leaves the session both ended and
 * without a pending transfer (this one, or the SessionEndJournal's end of the session) queues the
 * one `session.ended`. A transfer whose outcome never comes is closed by this instance after
 * TRANSFER_RING_TIMEOUT + grace (not answered) or SESSION_MAX_DURATION + grace after its answer.
 */
export class TransferOutcomes extends Effect.Service<TransferOutcomes>()("callgate/TransferOutcomes", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const publicUrl = yield* PublicUrl
    const sessions = yield* Sessions
    const outbox = yield* Outbox
    const metrics = yield* Metrics
    const bounds = yield* FiberMap.make<string, void, never>()
    /** The return path's deadlines, by session: the caller's stream back must open before it. */
    const returns = yield* FiberMap.make<string, void, never>()

    const outcomes = counterOn(metrics.registry, "callgate_transfers_total", "Transfers by who asked for them and their outcome (docs/fallback.md, \"Transfer outcomes\")", ["initiated_by", "status"])

    const ringSeconds = Math.min(MAX_RING_SECONDS, Math.max(MIN_RING_SECONDS, Math.round(Duration.toSeconds(config.transferRingTimeout))))
    const ringBound = Duration.sum(Duration.seconds(ringSeconds), TRANSFER_OUTCOME_GRACE)
    const talkBound = Duration.sum(config.sessionMaxDuration, TRANSFER_OUTCOME_GRACE)

    const trackingFor = (ref: TransferRef): TransferTracking => {
      const query = new URLSearchParams({ agentId: ref.agentId, sessionId: ref.sessionId }).toString()
      // Any instance can take the report (the pending transfer is in the store): the fleet's address when there is one.
      const base = Option.getOrElse(config.fleetUrl, () => publicUrl.current())
      return {
        outcomeUrl: `${base}${EntryPaths.twilioTransferOutcome}?${query}`,
        progressUrl: `${base}${EntryPaths.twilioTransferProgress}?${query}`,
        callControlEventsUrl: `${base}${EntryPaths.telnyxTransferEvents}?${query}`,
        timeoutSeconds: ringSeconds
      }
    }

    /** The TeXML twin of `trackingFor`: Telnyx posts to its own paths (Ed25519-signed). */
    const texmlTracking = (tracking: TransferTracking): TransferTracking => ({
      ...tracking,
      outcomeUrl: tracking.outcomeUrl.replace(EntryPaths.twilioTransferOutcome, EntryPaths.telnyxTransferOutcome),
      progressUrl: tracking.progressUrl.replace(EntryPaths.twilioTransferProgress, EntryPaths.telnyxTransferProgress)
    })

    /**
     * Queues the session's one session.ended once it is ended with no transfer pending, and lets go
     * of its ownership (kept while the transfer was pending, so the fleet's reconciliation finds a
     * session whose instance died before the outcome came: "When the outcome never comes").
     */
    const sendEnded = (session: Session) =>
      outbox.enqueue(sessionEndedEvent(session)).pipe(
        Effect.zipRight(
          session.instanceId === undefined ? Effect.void : sessions.disown(session.instanceId, { agentId: session.agentId, sessionId: session.id })
        ),
        Effect.retry(storeRetry),
        Effect.tapError((error) => Effect.logError("could not queue session.ended after the transfer's outcome", { error: error.message })),
        Effect.ignore
      )

    /**
     * Moves the pending transfer into `transfers` (once: a second report finds none pending and
     * reads the first one's record). Queues session.ended when the session had already ended.
     */
    const settle = (
      ref: TransferRef,
      reported: ReportedOutcome,
      startedAt?: string,
      returnWithin?: Duration.Duration
    ): Effect.Effect<Option.Option<SettledTransfer>, StoreError> =>
      Effect.gen(function* () {
        const nowMs = yield* Clock.currentTimeMillis
        const returnCaller = returnWithin !== undefined
        const awaitingStreamUntil = returnWithin === undefined ? undefined : isoAt(nowMs + Duration.toMillis(returnWithin))
        let decided: { record: TransferRecord; pending: PendingTransfer; closed: boolean; reopened: boolean } | undefined
        const written = yield* sessions.update(ref.agentId, ref.sessionId, (current) => {
          decided = undefined
          const pending = current.pendingTransfer
          if (pending === undefined || (startedAt !== undefined && pending.startedAt !== startedAt)) return current
          const startedMs = Date.parse(pending.startedAt)
          const measuredAnswer = pending.answeredAt === null ? undefined : Date.parse(pending.answeredAt)
          const status = reported.answeredWhenReported === true && measuredAnswer !== undefined ? "answered" : reported.status
          const answered = status === "answered"
          // Talk time as callgate saw it (the answer report to now), else as the carrier counted it.
          const talkMs = !answered ? 0 : measuredAnswer !== undefined ? Math.max(0, nowMs - measuredAnswer) : (reported.talkMsHint ?? 0)
          const sayBeforeHangup = !answered && pending.initiatedBy === "fallback" && reported.unreported !== true ? pending.failedMessage : null
          const record: TransferRecord = {
            to: pending.to,
            initiatedBy: pending.initiatedBy,
            status,
            ringMs: Math.max(0, (answered && measuredAnswer !== undefined ? measuredAnswer : nowMs - talkMs) - startedMs),
            talkMs,
            startedAt: pending.startedAt,
            endedAt: isoAt(nowMs),
            carrierStatus: reported.carrierStatus,
            transferFailedMessage: sayBeforeHangup !== null
          }
          const { pendingTransfer: _settled, ...rest } = current
          const transfers = [...(current.transfers ?? []), record]
          // The agent's transfer was not answered and the carrier waits for what the caller hears
          // next: the session opens again, in the same write, so no session.ended goes now.
          const reopened = returnCaller && pending.initiatedBy === "agent" && notAnswered(status) && reported.unreported !== true
          decided = { record, pending, closed: !reopened && !isOpenStatus(current.status), reopened }
          return reopened && awaitingStreamUntil !== undefined
            ? { ...rest, transfers, status: "active" as const, endReason: null, endedAt: null, awaitingStreamUntil }
            : { ...rest, transfers }
        })
        if (Option.isNone(written)) return Option.none()
        const session = written.value
        if (decided === undefined) {
          // Reported already: the caller still hears what the first report decided.
          const last = session.transfers?.at(-1)
          if (last === undefined || session.pendingTransfer !== undefined) return Option.none()
          return Option.some({ transfer: last, sayBeforeHangup: null, session, reopened: false })
        }
        const { record, closed, reopened } = decided
        outcomes.inc({ initiated_by: record.initiatedBy, status: record.status })
        yield* Effect.logInfo("transfer outcome", {
          sessionId: ref.sessionId,
          initiatedBy: record.initiatedBy,
          status: record.status,
          carrierStatus: record.carrierStatus ?? "none",
          ringMs: record.ringMs,
          talkMs: record.talkMs
        })
        if (closed) yield* sendEnded(session)
        yield* FiberMap.remove(bounds, ref.sessionId).pipe(Effect.when(() => startedAt === undefined))
        if (reopened && awaitingStreamUntil !== undefined) yield* FiberMap.run(returns, ref.sessionId, awaitReturn(ref, awaitingStreamUntil))
        return Option.some({
          transfer: record,
          sayBeforeHangup: record.transferFailedMessage ? decided.pending.failedMessage : null,
          session,
          reopened
        })
      })

    /**
     * Closes a transfer whose outcome never came (docs/fallback.md, "When the outcome never comes"):
     * its bounds count from the pending transfer's own times, so an instance that takes the watch
     * over from one that died (`watchLeft`) closes it when its maker would have.
     */
    const watch = (ref: TransferRef, startedAt: string): Effect.Effect<void> =>
      Effect.gen(function* () {
        for (;;) {
          const current = yield* sessions.get(ref.agentId, ref.sessionId).pipe(Effect.option)
          const pending = Option.flatMap(current, (s) => Option.fromNullable(s.pendingTransfer))
          if (Option.isNone(pending) || pending.value.startedAt !== startedAt) return
          const answeredAt = pending.value.answeredAt
          const due = answeredAt === null ? Date.parse(startedAt) + Duration.toMillis(ringBound) : Date.parse(answeredAt) + Duration.toMillis(talkBound)
          const now = yield* Clock.currentTimeMillis
          if (now < due) {
            yield* Effect.sleep(Duration.millis(due - now))
            continue
          }
          if (answeredAt === null) {
            yield* Effect.logWarning("no outcome came for the transfer within its ring bound: closed as failed", { sessionId: ref.sessionId })
            yield* Effect.ignore(settle(ref, { status: "failed", carrierStatus: null, unreported: true }, startedAt))
          } else {
            yield* Effect.logWarning("no end came for the answered transfer within SESSION_MAX_DURATION: closed as answered", { sessionId: ref.sessionId })
            yield* Effect.ignore(settle(ref, { status: "answered", carrierStatus: null, unreported: true }, startedAt))
          }
          return
        }
      }).pipe(Effect.catchAllCause((cause) => Effect.logError("the transfer outcome watch failed", cause)))

    /** Ends a session still waiting for the caller's stream back (`until`: that wait's, or any), once. */
    const endAwaitingReturn = (ref: TransferRef, until: string | undefined, end: (current: Session) => Pick<Session, "status" | "endReason" | "endedAt">) =>
      Effect.gen(function* () {
        let ended = false
        const written = yield* sessions.update(ref.agentId, ref.sessionId, (current) => {
          ended = current.status === "active" && current.awaitingStreamUntil !== undefined && (until === undefined || current.awaitingStreamUntil === until)
          if (!ended) return current
          const { awaitingStreamUntil: _over, ...rest } = current
          return { ...rest, ...end(current) }
        }).pipe(Effect.retry(storeRetry))
        if (!ended || Option.isNone(written)) return false
        yield* sendEnded(written.value)
        yield* FiberMap.remove(returns, ref.sessionId).pipe(Effect.when(() => until === undefined))
        return true
      })

    /**
     * The return path's deadline (docs/fallback.md, "The return path"): the caller was answered
     * with a stream back to an agent, whose single-use token expires; a session still waiting for
     * that stream at `until` (the token's life and a grace after the answer) never gets it (the caller
     * hung up, or the carrier could not open it). It is ended failed / return_stream_timeout, at the
     * time of the answer (the caller's last moment with callgate), with its one session.ended.
     */
    const awaitReturn = (ref: TransferRef, until: string): Effect.Effect<void> =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const due = Date.parse(until)
        if (now < due) yield* Effect.sleep(Duration.millis(due - now))
        const ended = yield* endAwaitingReturn(ref, until, (current) => ({
          status: "failed",
          endReason: RETURN_STREAM_TIMEOUT,
          endedAt: current.transfers?.at(-1)?.endedAt ?? isoAt(now)
        }))
        if (ended) yield* Effect.logWarning("the caller's stream back from the failed transfer never opened: the session is ended", { sessionId: ref.sessionId })
      }).pipe(Effect.catchAllCause((cause) => Effect.logError("the return path's deadline failed", cause)))

    /**
     * The carrier says the caller's call ended (Telnyx Call Control `call.hangup` of the caller's
     * leg): a session still waiting for the caller's stream back ends now, completed /
     * caller_hangup, with its one session.ended. Any other session is left as it is.
     */
    const callerLeft = (ref: TransferRef) =>
      Effect.gen(function* () {
        const now = isoAt(yield* Clock.currentTimeMillis)
        const ended = yield* endAwaitingReturn(ref, undefined, () => ({ status: "completed", endReason: "caller_hangup", endedAt: now }))
        if (ended) yield* Effect.logInfo("the caller hung up on the way back from the failed transfer: the session is ended", { sessionId: ref.sessionId })
      }).pipe(
        Effect.catchAll((error) => Effect.logWarning("could not end the session of a caller who hung up on the way back", { error: error.message }))
      )

    /**
     * Writes the transfer as pending on the session (before the carrier is asked) and watches for
     * its outcome; answers where the carrier is to report. A session whose record is gone gets no
     * tracking (the transfer runs untracked, as before).
     */
    const begin = (
      ref: TransferRef,
      transfer: { readonly to: string; readonly initiatedBy: "agent" | "fallback"; readonly failedMessage: string | null },
      kind: "twilio" | "telnyx-texml" | "telnyx-call-control"
    ): Effect.Effect<{ readonly tracking: TransferTracking; readonly pending: PendingTransfer } | undefined> =>
      Effect.gen(function* () {
        const startedAt = isoAt(yield* Clock.currentTimeMillis)
        const pending: PendingTransfer = { ...transfer, startedAt, answeredAt: null }
        const written = yield* sessions.update(ref.agentId, ref.sessionId, (current) => ({ ...current, pendingTransfer: pending }))
        if (Option.isNone(written)) return undefined
        yield* FiberMap.run(bounds, ref.sessionId, watch(ref, startedAt))
        const tracking = trackingFor(ref)
        return { tracking: kind === "telnyx-texml" ? texmlTracking(tracking) : tracking, pending }
      }).pipe(
        Effect.retry(storeRetry),
        Effect.catchAll((error) =>
          Effect.as(Effect.logWarning("could not record the pending transfer; it runs untracked", { error: error.message }), undefined)
        )
      )

    /** The number answered (Twilio/TeXML `answered` status callback, Telnyx call.answered / call.bridged). */
    const answered = (ref: TransferRef) =>
      Effect.gen(function* () {
        const at = isoAt(yield* Clock.currentTimeMillis)
        yield* sessions.update(ref.agentId, ref.sessionId, (current) =>
          current.pendingTransfer === undefined || current.pendingTransfer.answeredAt !== null
            ? current
            : { ...current, pendingTransfer: { ...current.pendingTransfer, answeredAt: at } }
        )
      }).pipe(Effect.retry(storeRetry))

    /**
     * Takes over the watch of a transfer whose instance stopped before its outcome came
     * (OrphanReconciler): closed at the same bound as its maker would have, by whichever watching
     * instance comes first (one conditional write), with the session's one session.ended.
     */
    const watchLeft = (ref: TransferRef, pending: PendingTransfer) =>
      FiberMap.run(bounds, ref.sessionId, watch(ref, pending.startedAt), { onlyIfMissing: true }).pipe(Effect.asVoid)

    /**
     * Takes over the return path's deadline of a re-opened session whose instance stopped
     * (OrphanReconciler, before its claim of an active session: the caller was not back yet).
     */
    const awaitReturnLeft = (ref: TransferRef, until: string) =>
      FiberMap.run(returns, ref.sessionId, awaitReturn(ref, until), { onlyIfMissing: true }).pipe(Effect.asVoid)

    return {
      begin,
      answered,
      /**
       * `returnCaller`: the report is a `<Dial action>` whose answer decides what the caller hears
       * next (Twilio, TeXML), or a Call Control hang-up of the new leg with the caller's leg still up,
       * so an agent's transfer that was not answered re-opens the session (`reopened`) for the
       * caller to come back (docs/fallback.md, "The return path"), for at most `within` (the life of
       * the stream token the caller comes back with; RETURN_STREAM_GRACE is added).
       */
      settle: (ref: TransferRef, reported: ReportedOutcome, options: { readonly returnCaller?: { readonly within: Duration.DurationInput } } = {}) =>
        settle(ref, reported, undefined, options.returnCaller === undefined ? undefined : Duration.sum(options.returnCaller.within, RETURN_STREAM_GRACE)),
      watchLeft,
      awaitReturnLeft,
      callerLeft
    } as const
  })
}) {}

/** Twilio and TeXML `DialCallStatus` (and a number's final `CallStatus`) as a transfer status. */
export const dialCallStatusOutcome = (status: string): TransferStatus | undefined => {
  switch (status) {
    case "completed":
    case "answered":
      return "answered"
    case "busy":
      return "busy"
    case "no-answer":
      return "no-answer"
    case "failed":
      return "failed"
    case "canceled":
      return "canceled"
    default:
      return undefined
  }
}

/**
 * Telnyx Call Control `hangup_cause` of the new leg as a transfer status: an answered leg that hung
 * up was answered whatever the cause; otherwise busy/rejected, timeout, the caller's cancel, or failed.
 */
export const hangupCauseOutcome = (cause: string | null, wasAnswered: boolean): TransferStatus => {
  if (wasAnswered) return "answered"
  switch (cause) {
    case "user_busy":
    case "call_rejected":
      return "busy"
    case "timeout":
    case "no_answer":
      return "no-answer"
    case "originator_cancel":
      return "canceled"
    default:
      return "failed"
  }
}
