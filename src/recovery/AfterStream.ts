import { withCallSpan } from "../observability/Tracing.js"
import { Clock, Duration, Effect, Option } from "effect"
import type { CarrierShape } from "../kernel/Carrier.js"
import { HardError } from "../kernel/HardError.js"
import { ErrorFallback } from "../fallback/ErrorFallback.js"
import { INSTANCE_LOST_MESSAGE, OrphanReconciler } from "./OrphanReconciler.js"
import { type CarrierCall, rescueUnrecorded } from "./UnrecordedCall.js"
import { SessionEndJournal } from "../sessions/SessionEndJournal.js"
import type { Session } from "../sessions/SessionSchema.js"
import { Sessions } from "../sessions/Sessions.js"

/** How long a session whose stream ended may stay active before the call counts as abandoned: its own instance ends it at once. */
const OWNER_GRACE = Duration.seconds(2)
/**
 * How long a session whose Call Control stream is moving to another instance (`streamMovingTo`)
 * may stay active with its old stream before the call counts as abandoned: the carrier started the
 * new stream, which that instance takes within moments; one that never comes is a lost call.
 */
const MOVE_GRACE = Duration.seconds(10)
const POLL = Duration.millis(100)

/**
 * The call that came back, as its carrier's `<Redirect>` request describes it. `stoppedStream`: a
 * Call Control stream's reference (SessionInfo.streamRef, the id of the token in its `stream_url`)
 * when the carrier's event named the stream that ended.
 */
export type ReturningCall = CarrierCall & { readonly stoppedStream?: string | undefined }

/**
 * `ended`: the session ended properly, the call only needs hanging up. `rescued`: the fallback acted
 * through the given carrier (or REST). `moved`: the stream that ended is an old one of a session
 * that lives on another stream now (an agent failover moved it to another instance): nothing to do.
 */
export type AfterStreamOutcome = "ended" | "rescued" | "moved"

/**
 * The stopped stream is not the session's stream any more: the record names another one and no
 * move is in flight. (While `streamMovingTo` is set the record still names the old stream, and a
 * stream that stops then may be the new one failing: the move's grace decides.)
 */
const isOldStream = (session: Session, stoppedStream: string | undefined): boolean =>
  stoppedStream !== undefined && session.streamMovingTo === undefined && session.streamRef !== undefined && session.streamRef !== stoppedStream

/**
 * A call whose `<Connect><Stream>` ended comes back to callgate through the entry answer's
 * `<Redirect>` (docs/reliability.md, "Instance loss"), on any instance; a Telnyx Call Control
 * call's `streaming.stopped` (or `streaming.failed`) event comes here the same way. A session
 * that ended properly needs nothing more than a hang-up. One still active after a short grace (its own
 * instance ends a session as soon as its stream closes) was abandoned: it is claimed exactly once,
 * like an orphan, and the environment's error fallback answers the call through `carrier` (the
 * answer to the carrier's request); its session ends failed / instance_lost. A Call Control
 * stream that stopped because an agent failover moved the call to another instance
 * (docs/design.md, "The path of a failover") is told apart by the stream's reference: once the
 * record names another stream, the stopped one is old and is ignored (while the move is in flight,
 * up to MOVE_GRACE is waited for the other instance to take the session).
 */
export class AfterStream extends Effect.Service<AfterStream>()("callgate/AfterStream", {
  effect: Effect.gen(function* () {
    const sessions = yield* Sessions
    const journal = yield* SessionEndJournal
    const reconciler = yield* OrphanReconciler
    const fallback = yield* ErrorFallback

    const read = (call: ReturningCall) =>
      sessions.get(call.agentId, call.sessionId).pipe(
        Effect.map(Option.some),
        Effect.catchTag("SessionNotFound", () => Effect.succeed(Option.none<Session>()))
      )

    /** The record once it is terminal, or as it stands when the grace runs out. */
    const settled = (call: ReturningCall) =>
      Effect.gen(function* () {
        const startedAt = yield* Clock.currentTimeMillis
        for (;;) {
          const found = yield* read(call)
          if (Option.isSome(found) && (found.value.status !== "active" || found.value.awaitingStreamUntil !== undefined)) return found
          if (Option.isSome(found) && isOldStream(found.value, call.stoppedStream)) return found
          const moving = Option.isSome(found) && found.value.streamMovingTo !== undefined
          const deadline = startedAt + Duration.toMillis(moving ? MOVE_GRACE : OWNER_GRACE)
          if (journal.isPending(call.sessionId) || (yield* Clock.currentTimeMillis) >= deadline) return found
          yield* Effect.sleep(POLL)
        }
      })

    /**
     * `carrier`: what the fallback acts through; the carriers' REST APIs when not given (a Telnyx
     * Call Control call, which has no document to answer: its `streaming.stopped` event comes here).
     */
    const answer = (call: ReturningCall, carrier?: CarrierShape): Effect.Effect<AfterStreamOutcome> =>
      Effect.gen(function* () {
        // Ended here and on its way to the store.
        if (journal.isPending(call.sessionId)) return "ended" as const
        const found = yield* settled(call)
        if (journal.isPending(call.sessionId)) return "ended" as const
        if (Option.isSome(found)) {
          if (found.value.status !== "active") return "ended" as const
          // A Call Control caller on the way back from a failed transfer: this is the old stream's
          // stop, come after the outcome re-opened the session. Its stream back, the caller's
          // hang-up or the return deadline ends it (docs/fallback.md, "The return path").
          if (call.call.kind === "telnyx-call-control" && found.value.awaitingStreamUntil !== undefined) return "ended" as const
          // The old stream of a call an agent failover moved to another instance: that one holds the session.
          if (isOldStream(found.value, call.stoppedStream)) {
            yield* Effect.logDebug("a stopped stream of a session that moved to another instance: ignored", { instanceId: found.value.instanceId })
            return "moved" as const
          }
          const claimed = yield* reconciler.claim({ agentId: call.agentId, sessionId: call.sessionId }, Infinity, (current) => !isOldStream(current, call.stoppedStream))
          if (Option.isNone(claimed)) return "ended" as const
          yield* reconciler.rescueClaimed(claimed.value, carrier)
          return "rescued" as const
        }
        // No record at all: the instance stopped before the session's start was written.
        yield* Effect.logWarning("a call came back for a session with no record: rescuing it", { callId: call.call.callId })
        yield* rescueUnrecorded({ fallback, journal }, call, new HardError({ kind: "instance_lost", message: INSTANCE_LOST_MESSAGE }), carrier, true)
        return "rescued" as const
      }).pipe(
        // The store cannot say: a hang-up is all that is safe.
        Effect.catchAll((error) => Effect.as(Effect.logError("a returning call could not be looked up; hanging up", { error: error.message }), "ended" as const)),
        Effect.annotateLogs({ sessionId: call.sessionId, agentId: call.agentId, environmentId: call.environmentId }),
        withCallSpan(call.sessionId, "callgate.after_stream", { attributes: { "callgate.session.id": call.sessionId } })
      )

    return { answer } as const
  })
}) {}
