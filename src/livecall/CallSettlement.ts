import { Cause, Duration, Effect, Option } from "effect"
import type { AgentTarget } from "../agent/AgentConnector.js"
import { Environments } from "../environments/Environments.js"
import { DEFAULT_AGENT_FAILOVER_TIMEOUT } from "../environments/EnvironmentSchema.js"
import { ErrorFallback } from "../fallback/ErrorFallback.js"
import { counterOn, Metrics } from "../observability/Metrics.js"
import { Carriers, type CarrierError } from "../kernel/Carrier.js"
import { InstanceIdentity } from "../config/InstanceIdentity.js"
import { Recordings } from "../recording/Recordings.js"
import { SessionEndJournal } from "../sessions/SessionEndJournal.js"
import { TransferOutcomes } from "../sessions/TransferOutcomes.js"
import type { PendingTransfer } from "../sessions/SessionSchema.js"
import type { LiveCall } from "./LiveCall.js"
import type { SessionEnding } from "./SessionEnding.js"
import { HardError } from "../kernel/HardError.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"
import type { AgentLeg, Session } from "../sessions/SessionSchema.js"
import { recordOf, type SessionEnd, Sessions, verdictFields } from "../sessions/Sessions.js"
import { CloseCode } from "../frames/WireSocket.js"
import { storeRetry } from "../kernel/StoreError.js"
import { nowDate } from "../kernel/Time.js"
import type { TurnRecord } from "../turns/TurnRecord.js"

/** An outer bound on one carrier REST action (the adapters time their own requests out first). */
const CARRIER_ACTION_TIMEOUT = Duration.seconds(30)

/**
 * The slow, effectful steps of a live call around its synchronous relay: record it, find its
 * agent's address, and, once it ends, act on the ending (`settle`: carrier REST, or the rescue),
 * close the record and queue session.ended. Failures of the store or the outbox are logged, never
 * thrown into the call. `settle` is where an ownership (fencing) check belongs: it is the one
 * place a live call's end is acted on and written.
 */
export class CallSettlement extends Effect.Service<CallSettlement>()("callgate/CallSettlement", {
  effect: Effect.gen(function* () {
    const sessions = yield* Sessions
    const environments = yield* Environments
    const carriers = yield* Carriers
    const fallback = yield* ErrorFallback
    const metrics = yield* Metrics
    const journal = yield* SessionEndJournal
    const { instanceId } = yield* InstanceIdentity
    const recordings = yield* Recordings
    const transfers = yield* TransferOutcomes

    /**
     * Records a transfer of the call as pending before the carrier is asked (docs/fallback.md,
     * "Transfer outcomes"); `pending` keeps what was recorded, for the session's end.
     */
    const trackTransfer = (info: SessionInfo, initiatedBy: "agent" | "fallback", pending: { current?: PendingTransfer }) =>
      (to: string, failedMessage: string | null) =>
        transfers.begin({ agentId: info.agentId, sessionId: info.sessionId }, { to, initiatedBy, failedMessage }, info.call.kind).pipe(
          Effect.map((begun) => {
            pending.current = begun?.pending
            return begun?.tracking
          })
        )

    const ended = counterOn(metrics.registry, "callgate_sessions_ended_total", "Call sessions ended, by status and reason", ["provider", "status", "reason"])

    const carrierAction = (operation: string, action: Effect.Effect<void, CarrierError>) =>
      action.pipe(
        Effect.timeoutFail({
          duration: CARRIER_ACTION_TIMEOUT,
          onTimeout: () => new HardError({ kind: "internal", message: `The carrier did not answer the ${operation} request in time.` })
        }),
        Effect.either
      )

    const begin = (info: SessionInfo) =>
      sessions.record(recordOf(info, instanceId)).pipe(
        Effect.retry(storeRetry),
        Effect.tapError((error) => Effect.logError("could not record the session start", { error: error.message })),
        Effect.ignore,
        Effect.zipRight(Effect.logInfo("session started", { provider: info.provider, callId: info.call.callId }))
      )

    const agentTarget = (info: SessionInfo): Effect.Effect<AgentTarget, HardError> =>
      environments.stored(info.agentId, info.environmentId).pipe(
        Effect.map((env) => ({
          agentId: info.agentId,
          environmentId: info.environmentId,
          agentUrl: env.agentUrl,
          reservedAgent: info.reservedAgent,
          agentSpeaksMulaw: env.agentAudioFormat === "audio/x-mulaw;rate=8000",
          failoverTimeoutSeconds: env.agentFailoverTimeout ?? DEFAULT_AGENT_FAILOVER_TIMEOUT
        })),
        Effect.catchTags({
          EnvironmentNotFound: () =>
            Effect.fail(
              new HardError({ kind: "environment_not_found", message: `Environment ${info.environmentId} no longer exists.` })
            ),
          StoreError: () => Effect.fail(new HardError({ kind: "internal", message: "The environment's configuration could not be read." }))
        })
      )

    /**
     * A session moved here by a failover on another instance (docs/design.md, "The path of a
     * failover"): its record is this instance's from now on (written with this instance's id, so
     * it joins the sessions this instance owns; the old instance disowns it), and its agent legs
     * and turns so far are read for the next agent's `resume`. A store that does not answer: the
     * record is written afresh, with no legs or turns.
     */
    const adopt = (info: SessionInfo): Effect.Effect<{ readonly agentLegs: ReadonlyArray<AgentLeg>; readonly turns: ReadonlyArray<TurnRecord> }> =>
      sessions.get(info.agentId, info.sessionId).pipe(
        Effect.map(Option.some),
        Effect.catchTag("SessionNotFound", () => Effect.succeed(Option.none<Session>())),
        Effect.flatMap((found) =>
          Option.match(found, {
            onNone: () => Effect.as(sessions.record(recordOf(info, instanceId)), { agentLegs: [], turns: [] }),
            onSome: ({ awaitingStreamUntil: _back, streamMovingTo: _moving, streamRef: _old, ...current }) =>
              // The caller is back (the return path's stream, when that is how they came): its deadline is met.
              // A Call Control stream that moved here is the session's stream now (its old one's stop is ignored).
              sessions.record({ ...current, instanceId, ...(info.streamRef !== undefined ? { streamRef: info.streamRef } : {}) }).pipe(
                // The instance that held it before lets go (it may be gone: a transfer's end kept it owned there).
                Effect.zipRight(
                  current.instanceId === undefined || current.instanceId === instanceId
                    ? Effect.void
                    : sessions.disown(current.instanceId, { agentId: info.agentId, sessionId: info.sessionId })
                ),
                Effect.as({ agentLegs: current.agentLegs ?? [], turns: current.turns })
              )
          })
        ),
        Effect.retry(storeRetry),
        Effect.tapError((error) => Effect.logError("could not adopt the session moved here", { error: error.message })),
        Effect.orElseSucceed(() => ({ agentLegs: [], turns: [] })),
        Effect.zipLeft(Effect.logInfo("session moved here", { provider: info.provider, callId: info.call.callId }))
      )

    /** A failover changed the call's agent legs: the live record shows them (off the media path; a failure is only logged). */
    const recordLegs = (info: SessionInfo, agentLegs: ReadonlyArray<AgentLeg>, agentFailovers: number) =>
      sessions
        .update(info.agentId, info.sessionId, (current) => (current.status === "active" ? { ...current, agentLegs, agentFailovers } : current))
        .pipe(
          Effect.tapError((error) => Effect.logWarning("could not record the session's agent legs", { error: error.message })),
          Effect.ignore
        )

    const runRescue = (info: SessionInfo, error: HardError) => {
      const pending: { current?: PendingTransfer } = {}
      return fallback.rescue(info, error, trackTransfer(info, "fallback", pending)).pipe(
        Effect.catchAllCause((cause) =>
          Effect.as(Effect.logError("the rescue failed", cause), { endReason: undefined, fallback: undefined, transferPending: undefined })
        ),
        Effect.map((outcome): Omit<SessionEnd, "endedAt"> => ({
          status: "failed",
          endReason: outcome.endReason ?? error.kind,
          fallback: outcome.fallback,
          ...(outcome.transferPending === true && pending.current !== undefined ? { pendingTransfer: pending.current } : {})
        })),
        Effect.tap(() => Effect.logWarning("session hit a hard error", { kind: error.kind, error: error.message }))
      )
    }

    /** Hangs the call up through its carrier (a failure is only logged); the record says `end`. */
    const hangUp = (info: SessionInfo, end: Omit<SessionEnd, "endedAt">) =>
      carrierAction("hangup", carriers.hangup(info.call)).pipe(
        Effect.tap((result) => (result._tag === "Left" ? Effect.logWarning("hanging up failed", { error: result.left.message }) : Effect.void)),
        Effect.as(end)
      )

    /** Acts on how the call ended; returns what the record says. */
    const actOn = (relay: LiveCall, ending: SessionEnding): Effect.Effect<Omit<SessionEnd, "endedAt">> => {
      const { info } = relay
      switch (ending._tag) {
        case "Completed":
          if (ending.reason === "caller_hangup") return Effect.succeed({ status: "completed", endReason: "caller_hangup" })
          return hangUp(info, { status: "completed", endReason: ending.reason })
        case "Timeout":
          return hangUp(info, { status: "timeout", endReason: "max_duration" })
        case "Transfer": {
          const pending: { current?: PendingTransfer } = {}
          const callerId = info.direction === "inbound" ? (info.to ?? undefined) : (info.from ?? undefined)
          return trackTransfer(info, "agent", pending)(ending.to, null).pipe(
            Effect.flatMap((tracking) => carrierAction("transfer", carriers.transfer(info.call, ending.to, callerId, tracking))),
            Effect.flatMap((result) =>
              result._tag === "Right"
                ? Effect.succeed({
                    status: "completed" as const,
                    endReason: "agent_transfer",
                    ...(pending.current !== undefined ? { pendingTransfer: pending.current } : {})
                  })
                : runRescue(info, new HardError({ kind: "transfer_failed", message: `The agent's transfer failed: ${result.left.message}` }))
            )
          )
        }
        case "Twiml":
          return carrierAction("applyTwiml", carriers.applyTwiml(info.call, ending.twiml)).pipe(
            Effect.flatMap((result) =>
              result._tag === "Right"
                ? Effect.succeed({ status: "completed" as const, endReason: ending.reason })
                : runRescue(info, new HardError({ kind: "twiml_failed", message: `The agent's TwiML could not be applied: ${result.left.message}` }))
            )
          )
        case "Failed":
          return runRescue(info, ending.error)
        case "TakenOver":
          return Effect.succeed({ status: "failed" as const, endReason: "instance_lost" })
        case "Moved":
          // settle lets go of a moved call before acting on any ending: never reached.
          return Effect.succeed({ status: "failed" as const, endReason: "moved" })
      }
    }

    /**
     * Acts on the ending (the rescue, for a hard error), closes the record and queues
     * session.ended; returns the closed record. Run once per call, by LiveCall.run.
     */
    const settle = (relay: LiveCall, ending: SessionEnding): Effect.Effect<Session> =>
      Effect.gen(function* () {
        const { info } = relay
        if (ending._tag === "TakenOver") {
          // Fenced: the instance that claimed the session rescues and ends it; this one only lets go.
          relay.release(CloseCode.normal, "the call moved to another instance")
          relay.carrier.close(CloseCode.normal, "the call moved to another instance")
          return { ...recordOf(info, instanceId), status: "failed" as const, endReason: "instance_lost" }
        }
        if (ending._tag === "Moved") {
          // The call's stream moved to another instance, which holds the session now and ends it
          // once, at the real end: this one lets go, with no carrier request and no session.ended.
          relay.release(CloseCode.normal, "the call moved to another instance")
          relay.carrier.close(CloseCode.normal, "the call moved to another instance")
          yield* recordings.finish(info.sessionId).pipe(Effect.ignore)
          yield* sessions.disown(instanceId, { agentId: info.agentId, sessionId: info.sessionId }).pipe(
            Effect.tapError((error) => Effect.logWarning("could not let go of the session moved to another instance", { error: error.message })),
            Effect.ignore
          )
          yield* Effect.logInfo("session moved to another instance", { instanceId: ending.to })
          // Still active: the instance it moved to holds it (and its lease, see CarrierStreams).
          return { ...recordOf(info, instanceId), status: "active" as const }
        }
        // The agent hears `stop` first; the carrier stream stays open while the rescue may still
        // hand the call to TwiML, and is closed once the ending has been acted on.
        relay.release(CloseCode.normal, "the call ended")
        const recording = yield* recordings.finish(info.sessionId)
        const outcome = yield* actOn(relay, ending)
        relay.carrier.close(CloseCode.normal, "the call ended")
        const end: SessionEnd = { ...outcome, endedAt: yield* nowDate, turns: relay.turns() }
        ended.inc({ provider: info.provider, status: end.status, reason: end.endReason })
        yield* Effect.annotateCurrentSpan({ "callgate.session.status": end.status, "callgate.session.end_reason": end.endReason })
        if (relay.observerFailure !== undefined) {
          yield* Effect.logError("the turn observer failed during the call and was switched off", Cause.die(relay.observerFailure))
        }
        // Written and queued through the journal: kept and retried while the store is away
        // (docs/reliability.md, "Store outages"); this waits only for the first try.
        const record = yield* journal.submit({
          session: {
            ...recordOf(info, instanceId),
            status: end.status,
            endReason: end.endReason,
            endedAt: end.endedAt.toISOString(),
            fallback: end.fallback ?? null,
            ...(end.pendingTransfer !== undefined ? { pendingTransfer: end.pendingTransfer } : {}),
            ...verdictFields(relay.answeredBy),
            ...(relay.agentLegs().length > 0 ? { agentLegs: relay.agentLegs(end.endReason) } : {}),
            agentFailovers: relay.failoverCount,
            ...(Option.isSome(recording) ? { recording: recording.value } : {})
          },
          ...(end.turns !== undefined ? { turns: end.turns } : {})
        })
        yield* Effect.logInfo("session ended", {
          status: end.status,
          endReason: end.endReason,
          durationMs: end.endedAt.getTime() - info.createdAt.getTime(),
          ...(relay.droppedFrames > 0 ? { droppedFrames: relay.droppedFrames } : {})
        })
        return record
      })

    return { begin, adopt, agentTarget, settle, recordLegs } as const
  })
}) {}
