import { Clock, Effect, Option } from "effect"
import { ErrorFallback } from "../../fallback/ErrorFallback.js"
import { HardError } from "../../kernel/HardError.js"
import { isoAt } from "../../kernel/Time.js"
import { sessionInfoOf } from "../../recovery/OrphanReconciler.js"
import { SessionEndJournal } from "../../sessions/SessionEndJournal.js"
import type { PendingTransfer } from "../../sessions/SessionSchema.js"
import { type SettledTransfer, TransferOutcomes } from "../../sessions/TransferOutcomes.js"
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
export const returnCaller = (
  kind: "twilio" | "telnyx-texml",
  settled: SettledTransfer
): Effect.Effect<EntryResponse, never, CallRelocation | ErrorFallback | SessionEndJournal | TransferOutcomes> =>
  Effect.gen(function* () {
    const { session, transfer } = settled
    const info = sessionInfoOf(session)
    const back = yield* (yield* CallRelocation).bringBack(info, kind, {
      failover: session.agentFailovers ?? 0,
      previousEndReason: "transfer_failed",
      lostAt: yield* Clock.currentTimeMillis,
      createdAt: Date.parse(session.createdAt),
      transfer: { to: transfer.to, status: transfer.status }
    })
    if (Option.isSome(back)) {
      yield* Effect.logInfo("the agent's transfer was not answered: the caller goes back to an agent", {
        transferStatus: transfer.status,
        instanceId: back.value.instanceId
      })
      return markupAnswer(back.value.twiml)
    }
    // No agent idle anywhere: the error fallback, in the answer (its phone transfer tracked like any other).
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
    const answer = answerCarrier()
    const outcome = yield* (yield* ErrorFallback).rescueWith(info, error, answer.carrier, "redirect", tracker)
    yield* Effect.logWarning("the agent's transfer was not answered and no agent is idle: the error fallback answers", {
      transferStatus: transfer.status
    })
    yield* (yield* SessionEndJournal).submit({
      session: {
        ...session,
        status: "failed",
        endReason: error.kind,
        endedAt: isoAt(yield* Clock.currentTimeMillis),
        fallback: outcome.fallback ?? null,
        ...(outcome.transferPending === true && pending.current !== undefined ? { pendingTransfer: pending.current } : {})
      }
    })
    return markupAnswer(answer.markup())
  }).pipe(Effect.annotateLogs({ sessionId: settled.session.id, agentId: settled.session.agentId, environmentId: settled.session.environmentId }))
