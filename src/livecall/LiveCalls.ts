import { randomBytes } from "node:crypto"
import { Deferred, Duration, Effect, Either, Exit, FiberId, FiberMap, Option, Queue } from "effect"
import { AgentConnector } from "../agent/AgentConnector.js"
import { Breaker } from "../breaker/Breaker.js"
import { AppConfig } from "../config/AppConfig.js"
import { counterOn, Metrics, sampledGaugeOn } from "../observability/Metrics.js"
import { providerOf } from "../kernel/Carrier.js"
import type { MachineVerdict, StreamOpening } from "../kernel/CallLegs.js"
import { newSessionId, type SessionInfo } from "../kernel/SessionInfo.js"
import { CloseCode } from "../frames/WireSocket.js"
import type { FrameProblem } from "../frames/FrameDecoding.js"
import { Recordings } from "../recording/Recordings.js"
import type { Session } from "../sessions/SessionSchema.js"
import { CallSettlement } from "./CallSettlement.js"
import { CallTurns } from "./CallTurns.js"
import { CallCheckpoints } from "./CallCheckpoints.js"
import { CarrierCallEvents } from "./CarrierCallEvents.js"
import { FailoverMetrics } from "./FailoverMetrics.js"
import { CallMover } from "./CallMover.js"
import { InstanceIdentity } from "../config/InstanceIdentity.js"
import { LiveCall, type LiveCallParts, SessionEnding } from "./LiveCall.js"

const newStreamSid = () => `MZ${randomBytes(16).toString("hex")}`
import { dateAt } from "../kernel/Time.js"

/** Re-exported for the callers that mint a session before its stream opens (outbound calls). */
export { newSessionId } from "../kernel/SessionInfo.js"

/** An outbound call callgate placed, waiting for its media stream (the carrier answered it). */
export interface OutboundExpectation {
  readonly agentId: string
  readonly environmentId: string
  /** When the call was placed: the session's createdAt. */
  readonly createdAt: Date
  readonly metadata?: Readonly<Record<string, string>> | undefined
  /** The carrier's call id once the carrier accepted the call; a stream for another call is refused. */
  callId?: string | undefined
  /** The machine-detection verdict when it came before the stream: the agent's `start` carries it. */
  answeredBy?: MachineVerdict | undefined
  /** Called once, synchronously, when the stream opened the session. */
  readonly opened: (live: LiveSession) => void
}

/** A live session as the call-control API sees it. */
export interface LiveSession {
  readonly info: SessionInfo
  /** Ends the session with `ending` unless it is already ending; true when this ending stands. */
  readonly end: (ending: SessionEnding) => boolean
  /** The session's closed record once its ending was acted on (none if it was cut at shutdown). */
  readonly settled: Effect.Effect<Option.Option<Session>>
}

/**
 * Every live call of this instance: opened synchronously by a carrier stream at `start`, each
 * owned by its LiveCall and run as one fiber (`LiveCall.run`) in a FiberMap keyed by session id,
 * in this service's scope, so the drain at shutdown (LiveCallDrain) can wait for them and whatever
 * is left is interrupted when the app stops. Reachable by session id (the call-control API) and by
 * carrier call id (a Telnyx call.hangup ends it), and the outbound calls still waiting for their
 * stream. Once the drain stopped it, it opens no new call.
 */
export class LiveCalls extends Effect.Service<LiveCalls>()("callgate/LiveCalls", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const metrics = yield* Metrics
    const callEvents = yield* CarrierCallEvents
    const recordings = yield* Recordings
    const parts: LiveCallParts = {
      settlement: yield* CallSettlement,
      turns: yield* CallTurns,
      checkpoints: yield* CallCheckpoints,
      breaker: yield* Breaker,
      connector: yield* AgentConnector,
      newStreamSid,
      failovers: yield* FailoverMetrics,
      maxFailovers: config.agentFailoverMaxPerSession,
      instanceId: (yield* InstanceIdentity).instanceId,
      mover: yield* CallMover
    }
    const fibers = yield* FiberMap.make<string, void, never>()
    const fork = yield* FiberMap.runtime(fibers)<never>()

    const bySession = new Map<string, LiveCall>()
    const settledBy = new Map<string, Deferred.Deferred<Option.Option<Session>>>()
    /** Outbound calls placed from this instance whose stream has not opened yet, by session id. */
    const expected = new Map<string, OutboundExpectation>()
    const byCall = new Map<string, LiveCall>()
    let draining = false

    sampledGaugeOn(metrics.registry, "callgate_sessions_active", "Call sessions live on this instance", () => bySession.size)
    const refusals = counterOn(metrics.registry, "callgate_stream_refusals_total", "Authenticated media streams refused before a session opened, by reason", ["reason"])

    /** The call's fiber ended: it leaves the registry, and whoever awaits its settling hears how. */
    const unregister = (relay: LiveCall, record: Option.Option<Session>) => {
      bySession.delete(relay.info.sessionId)
      const settled = settledBy.get(relay.info.sessionId)
      settledBy.delete(relay.info.sessionId)
      if (settled !== undefined) Deferred.unsafeDone(settled, Exit.succeed(record))
      if (byCall.get(relay.info.call.callId) === relay) byCall.delete(relay.info.call.callId)
    }

    /**
     * SESSION_MAX_DURATION, for every call at once: when each running call started (Effect clock),
     * in starting order, which with one duration for all is also the order they expire in. One
     * fiber sleeps until the oldest is due and ends it with Timeout; calls that end first leave the
     * map, so a wake-up for one of them only sets the next.
     */
    const clock = yield* Effect.clock
    const maxDurationMs = Duration.toMillis(config.sessionMaxDuration)
    const startedAt = new Map<string, { readonly call: LiveCall; readonly atMs: number }>()
    const timed = yield* Queue.sliding<true>(1)
    const nextExpiry = Effect.suspend(() => {
      const oldest = startedAt.values().next()
      if (oldest.done === true) return Queue.take(timed)
      const dueIn = oldest.value.atMs + maxDurationMs - clock.unsafeCurrentTimeMillis()
      if (dueIn > 0) return Effect.sleep(dueIn)
      startedAt.delete(oldest.value.call.info.sessionId)
      oldest.value.call.end(SessionEnding.Timeout())
      return Effect.void
    })
    yield* nextExpiry.pipe(Effect.forever, Effect.forkScoped)

    /** Runs the call's fiber; synchronous, so the caller's frames are never held up. */
    const start = (call: LiveCall): void => {
      const { sessionId } = call.info
      startedAt.set(sessionId, { call, atMs: clock.unsafeCurrentTimeMillis() })
      if (startedAt.size === 1) Queue.unsafeOffer(timed, true)
      fork(
        sessionId,
        call.run(parts).pipe(
          Effect.onExit((exit) =>
            Effect.sync(() => {
              startedAt.delete(sessionId)
              // The closed record, or none when the call was cut at shutdown before it could finish.
              unregister(call, Exit.isSuccess(exit) ? Option.some(exit.value) : Option.none())
            })
          ),
          Effect.asVoid
        )
      )
    }

    /** Opens a session for a stream whose credentials were checked; synchronous, so no frame is missed. */
    const open = (opening: StreamOpening): Either.Either<void, FrameProblem> => {
      if (draining) {
        refusals.inc({ reason: "draining" })
        return Either.left({ code: CloseCode.tryAgainLater, reason: "callgate is shutting down: no new calls" })
      }
      if (byCall.has(opening.callId)) {
        refusals.inc({ reason: "duplicate_call" })
        return Either.left({ code: CloseCode.policyViolation, reason: "a stream for this call is already open" })
      }
      const outbound = opening.sessionId !== undefined ? expected.get(opening.sessionId) : undefined
      if (opening.sessionId !== undefined) {
        // Only a call this instance placed, still waiting, for the agent and call it was placed for.
        if (
          outbound === undefined ||
          outbound.agentId !== opening.agentId ||
          outbound.environmentId !== opening.environmentId ||
          (outbound.callId !== undefined && outbound.callId !== opening.callId)
        ) {
          refusals.inc({ reason: "unexpected_outbound" })
          return Either.left({ code: CloseCode.policyViolation, reason: "no outbound call is waiting for this stream" })
        }
        expected.delete(opening.sessionId)
      }
      const info: SessionInfo = {
        sessionId: opening.sessionId ?? opening.entrySessionId ?? newSessionId(),
        agentId: opening.agentId,
        environmentId: opening.environmentId,
        provider: providerOf(opening.kind),
        call: { kind: opening.kind, callId: opening.callId, accountSid: opening.accountSid },
        from: opening.from ?? null,
        to: opening.to ?? null,
        direction: opening.direction ?? "inbound",
        streamSid: opening.streamSid,
        reservedAgent: opening.reservedAgent,
        createdAt: outbound?.createdAt ?? dateAt(opening.resumed?.createdAt ?? clock.unsafeCurrentTimeMillis()),
        ...(opening.resumed !== undefined ? { resumed: opening.resumed } : {}),
        ...(outbound?.metadata !== undefined ? { metadata: outbound.metadata } : {}),
        ...(opening.customParameters !== undefined ? { customParameters: opening.customParameters } : {}),
        ...(outbound?.answeredBy !== undefined ? { answeredBy: outbound.answeredBy } : {}),
        ...(opening.mediaFormat !== undefined ? { mediaFormat: opening.mediaFormat } : {}),
        ...(opening.recording !== undefined ? { recording: opening.recording } : {}),
        ...(opening.streamRef !== undefined ? { streamRef: opening.streamRef } : {})
      }
      const carrier = recordings.tap(info, opening.carrier)
      const relay = new LiveCall(info, carrier)
      carrier.bind(relay)
      bySession.set(info.sessionId, relay)
      settledBy.set(info.sessionId, Deferred.unsafeMake<Option.Option<Session>>(FiberId.none))
      byCall.set(info.call.callId, relay)
      start(relay)
      if (outbound !== undefined) {
        try {
          outbound.opened(Option.getOrThrow(live(info.sessionId)))
        } catch {
          // The placer's bookkeeping must not break the call.
        }
      }
      return Either.void
    }

    // A Telnyx call.hangup (Call Control webhook) ends the session of that call.
    const hangups = yield* callEvents.subscribe
    yield* Queue.take(hangups).pipe(
      Effect.tap((event) =>
        Effect.sync(() => (event._tag === "CallHungUp" ? byCall.get(event.callId)?.end(SessionEnding.Completed({ reason: "caller_hangup" })) : undefined))
      ),
      Effect.forever,
      Effect.forkScoped
    )

    const liveCount = () => bySession.size

    /**
     * Outbound calls (docs/calls.md, "Placing outbound calls"): the placer registers the session
     * before asking the carrier, so the stream of the answered call can open exactly that session.
     * `withdraw` takes an expectation back (the call ended unanswered, or was canceled); false when
     * the stream already opened it (or it was never there).
     */
    const expectOutbound = (sessionId: string, expectation: OutboundExpectation) => void expected.set(sessionId, expectation)
    const withdrawOutbound = (sessionId: string): boolean => expected.delete(sessionId)

    /**
     * An outbound call's machine-detection verdict: to the live session (its agent hears it), or
     * kept with the call still waiting for its stream (the agent's `start` carries it). False when
     * this instance has neither.
     */
    const machineVerdict = (sessionId: string, verdict: MachineVerdict): boolean => {
      const relay = bySession.get(sessionId)
      if (relay !== undefined) {
        relay.machineVerdict(verdict)
        return true
      }
      const waiting = expected.get(sessionId)
      if (waiting === undefined) return false
      waiting.answeredBy ??= verdict
      return true
    }
    const outboundExpectation = (sessionId: string): Option.Option<OutboundExpectation> => Option.fromNullable(expected.get(sessionId))

    /** The live session with this id on this instance, if any. */
    const live = (sessionId: string): Option.Option<LiveSession> => {
      const relay = bySession.get(sessionId)
      const settled = settledBy.get(sessionId)
      if (relay === undefined || settled === undefined) return Option.none()
      return Option.some({
        info: relay.info,
        end: (ending) => relay.end(ending) === ending,
        settled: Deferred.await(settled)
      })
    }

    /** No new sessions from now on (the drain at shutdown): streams are refused with "try again later". */
    const stopOpening = Effect.sync(() => {
      draining = true
    })

    /** Ends every live session with `ending` (each one's first ending stands). */
    const endAll = (ending: SessionEnding): void => {
      for (const relay of bySession.values()) relay.end(ending)
    }

    return {
      open,
      stopOpening,
      endAll,
      /** Waits until no call's fiber runs. */
      awaitIdle: FiberMap.awaitEmpty(fibers),
      isDraining: (): boolean => draining,
      liveCount,
      live,
      expectOutbound,
      withdrawOutbound,
      outboundExpectation,
      machineVerdict
    } as const
  })
}) {}
