import { Clock, Effect, Option } from "effect"
import { ErrorFallback } from "../../fallback/ErrorFallback.js"
import type { CarrierShape } from "../../kernel/Carrier.js"
import { HardError } from "../../kernel/HardError.js"
import { isoAt } from "../../kernel/Time.js"
import { sessionInfoOf } from "../../recovery/OrphanReconciler.js"
import { SessionEndJournal } from "../../sessions/SessionEndJournal.js"
import type { PendingTransfer } from "../../sessions/SessionSchema.js"
import { type SettledTransfer, TransferOutcomes } from "../../sessions/TransferOutcomes.js"
import { TelnyxCallCommands } from "../../carriers/TelnyxCallCommands.js"
import type { ResumedSession } from "../../kernel/CallLegs.js"
import { markupAnswer } from "./CallAdmission.js"
import { CallRelocation } from "./CallRelocation.js"
import { answerCarrier } from "./EntryFallback.js"
import type { EntryResponse } from "./EntryWire.js"

/**
 * The return path (docs/fallback.md, "The return path"): the agent's transfer of a Twilio or TeXML
 * call was not answered (busy, no-answer, failed), its outcome re-opened the session
 * (TransferOutcomes.settle, `reopened`), and the carrier waits for the `<Dial action>`'s answer.
 * The answer puts the caller back on an idle dial-in agent of the environment (CallRelocation's
 * reservation and single-use token: the same session, `resumed` with previousEndReason
 * `transfer_failed` and the transfer); with none idle, it is the environment's error fallback
 * (answered, as at the entry) and the session ends `failed` / `transfer_failed` through the
 * journal, its one session.ended then (or after the fallback's own transfer, when it dials one).
 */
const resumedAfter = (settled: SettledTransfer) =>
  Effect.map(
    Clock.currentTimeMillis,
    (lostAt): ResumedSession => ({
      failover: settled.session.agentFailovers ?? 0,
      previousEndReason: "transfer_failed",
      lostAt,
      createdAt: Date.parse(settled.session.createdAt),
      transfer: { to: settled.transfer.to, status: settled.transfer.status }
    })
  )

/**
 * No agent idle anywhere (or the caller could not be streamed back): the environment's error
 * fallback acts on the call through `carrier` (its phone transfer tracked like any other), and the
 * session ends failed / transfer_failed through the journal.
 */
const fallbackAfterTransfer = (
  settled: SettledTransfer,
  kind: "twilio" | "telnyx-texml" | "telnyx-call-control",
  carrier: CarrierShape | undefined,
  via: "rest" | "redirect"
) =>
  Effect.gen(function* () {
    const { session, transfer } = settled
    const info = sessionInfoOf(session)
    const error = new HardError({
      kind: "transfer_failed",
      message: `The agent's transfer was not answered (${transfer.status}) and no agent of the environment is idle.`
    })
    const outcomes = yield* TransferOutcomes
    const pending: { current?: PendingTransfer } = {}
    const tracker = (to: string, failedMessage: string | null) =>
      outcomes.begin({ agentId: session.agentId, sessionId: session.id }, { to, initiatedBy: "fallback", failedMessage }, kind).pipe(
        Effect.map((begun) => {
          pending.current = begun?.pending
          return begun?.tracking
        })
      )
    const fallback = yield* ErrorFallback
    const outcome = yield* carrier === undefined ? fallback.rescue(info, error, tracker) : fallback.rescueWith(info, error, carrier, via, tracker)
    yield* Effect.logWarning("the agent's transfer was not answered and no agent is idle: the error fallback answers", {
      transferStatus: transfer.status
    })
    const { awaitingStreamUntil: _back, ...rest } = session
    yield* (yield* SessionEndJournal).submit({
      session: {
        ...rest,
        status: "failed",
        endReason: error.kind,
        endedAt: isoAt(yield* Clock.currentTimeMillis),
        fallback: outcome.fallback ?? null,
        ...(outcome.transferPending === true && pending.current !== undefined ? { pendingTransfer: pending.current } : {})
      }
    })
  })

/**
 * The return path (docs/fallback.md, "The return path"): the agent's transfer of a Twilio or TeXML
 * call was not answered (busy, no-answer, failed), its outcome re-opened the session
 * (TransferOutcomes.settle, `reopened`), and the carrier waits for the `<Dial action>`'s answer.
 * The answer puts the caller back on an idle dial-in agent of the environment (CallRelocation's
 * reservation and single-use token: the same session, `resumed` with previousEndReason
 * `transfer_failed` and the transfer); with none idle, it is the environment's error fallback
 * (answered, as at the entry) and the session ends `failed` / `transfer_failed` through the
 * journal, its one session.ended then (or after the fallback's own transfer, when it dials one).
 */
export const returnCaller = (
  kind: "twilio" | "telnyx-texml",
  settled: SettledTransfer
): Effect.Effect<EntryResponse, never, CallRelocation | ErrorFallback | SessionEndJournal | TransferOutcomes> =>
  Effect.gen(function* () {
    const { session, transfer } = settled
    const back = yield* (yield* CallRelocation).bringBack(sessionInfoOf(session), kind, yield* resumedAfter(settled))
    if (Option.isSome(back)) {
      yield* Effect.logInfo("the agent's transfer was not answered: the caller goes back to an agent", {
        transferStatus: transfer.status,
        instanceId: back.value.instanceId
      })
      return markupAnswer(back.value.twiml)
    }
    // No agent idle anywhere: the error fallback, in the answer (its phone transfer tracked like any other).
    const answer = answerCarrier()
    yield* fallbackAfterTransfer(settled, kind, answer.carrier, "redirect")
    return markupAnswer(answer.markup())
  }).pipe(Effect.annotateLogs({ sessionId: settled.session.id, agentId: settled.session.agentId, environmentId: settled.session.environmentId }))

/**
 * The return path of a Call Control call (docs/fallback.md, "The return path"): Telnyx keeps the
 * caller's leg when the transfer's new leg hangs up unanswered, so callgate starts a stream on it
 * again (`streaming_start`) to an idle dial-in agent of the environment (the same reservation and
 * `resumed` token as Twilio and TeXML); with none idle, or when Telnyx refuses the command (the
 * caller is gone), the environment's error fallback acts on the call through the REST API.
 */
export const returnCallControlCaller = (
  settled: SettledTransfer
): Effect.Effect<void, never, CallRelocation | ErrorFallback | SessionEndJournal | TransferOutcomes | TelnyxCallCommands> =>
  Effect.gen(function* () {
    const { session, transfer } = settled
    const back = yield* (yield* CallRelocation).bringBackStream(sessionInfoOf(session), yield* resumedAfter(settled))
    if (Option.isSome(back)) {
      const started = yield* (yield* TelnyxCallCommands).startStream(session.callId, back.value.stream).pipe(Effect.either)
      if (started._tag === "Right") {
        yield* Effect.logInfo("the agent's transfer was not answered: the caller goes back to an agent", {
          transferStatus: transfer.status,
          instanceId: back.value.instanceId
        })
        return
      }
      yield* Effect.logWarning("the caller's stream back could not be started: the error fallback acts", { error: started.left.message })
    }
    yield* fallbackAfterTransfer(settled, "telnyx-call-control", undefined, "rest")
  }).pipe(Effect.annotateLogs({ sessionId: settled.session.id, agentId: settled.session.agentId, environmentId: settled.session.environmentId }))
