import { Duration, Effect, FiberSet, Option, Queue } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { PublicUrl } from "../config/PublicUrl.js"
import { type CallKind, type CallRef, Carriers, type Provider } from "../kernel/Carrier.js"
import type { MachineVerdict } from "../kernel/CallLegs.js"
import { verdictFields } from "../sessions/Sessions.js"
import { Environments } from "../environments/Environments.js"
import { CallLeases } from "../sessions/CallLeases.js"
import { SessionEnding } from "../livecall/LiveCall.js"
import { CarrierCallEvents } from "../livecall/CarrierCallEvents.js"
import { type LiveSession, newSessionId, LiveCalls } from "../livecall/LiveCalls.js"
import type { Session } from "../sessions/SessionSchema.js"
import { SessionNotFound, sessionEndedEvent, Sessions } from "../sessions/Sessions.js"
import { EntryPaths } from "../kernel/EntryPaths.js"
import { Outbox } from "../webhooks/Outbox.js"
import { storeRetry } from "../kernel/StoreError.js"
import { nowDate } from "../kernel/Time.js"
import {
  DEFAULT_RING_TIMEOUT_SECONDS,
  OutboundNotConfigured,
  OutboundPlacementFailed,
  type MachineDetection,
  type PlaceCallBody,
  telnyxAnsweredBy,
  twilioVerdict,
  telnyxUnanswered,
  TooManyOutboundCalls,
  twilioUnanswered,
  type UnansweredReason
} from "./OutboundCallWire.js"

/** Where an outbound call callgate placed is, until its session is over. */
interface Placed {
  readonly sessionId: string
  readonly agentId: string
  readonly environmentId: string
  readonly kind: CallKind
  call: CallRef | undefined
  phase: "placing" | "queued" | "ringing" | "answered" | "live" | "ended"
  readonly machineDetection: MachineDetection
  /** The carrier's verdict, once given (the first stands). */
  verdict: MachineVerdict | undefined
}

/** Twilio's "the call is going": progress that is not an ending. */
const TWILIO_PROGRESS = new Set(["queued", "initiated", "in-progress", "answered"])

/**
 * Outbound calls (docs/calls.md, "Placing outbound calls"): placed from this instance through the
 * carrier's REST API, with the session recorded at once (`queued`). The carrier's answer reaches
 * callgate's entry endpoints with the session id in their query; the stream then opens exactly
 * that session (LiveCalls.expectOutbound) and the call goes on like any other. A call that
 * ends unanswered (busy, no answer, failed, canceled) ends its session `failed` with that reason:
 * one session.ended, no fallback (there is no caller to rescue). At most
 * `maxConcurrentOutboundCalls` per environment are placed or live at once on this instance.
 */
export class OutboundCalls extends Effect.Service<OutboundCalls>()("callgate/OutboundCalls", {
  scoped: Effect.gen(function* () {
    const { config, publicUrl, environments, sessions, registry, outbox, carriers, callEvents } = yield* Effect.all({
      config: AppConfig,
      publicUrl: PublicUrl,
      environments: Environments,
      sessions: Sessions,
      registry: LiveCalls,
      outbox: Outbox,
      carriers: Carriers,
      callEvents: CarrierCallEvents
    })
    const leases = yield* CallLeases
    const runFork = yield* FiberSet.makeRuntime<never>()

    const placed = new Map<string, Placed>()
    const byCallId = new Map<string, string>()

    /** The call is over for this service: its place in the fleet's count is free and it is forgotten. */
    const release = (call: Placed) => {
      if (!placed.delete(call.sessionId)) return
      if (call.call !== undefined) byCallId.delete(call.call.callId)
      runFork(leases.release(call.agentId, call.environmentId, call.sessionId))
    }

    const missingFor = (provider: Provider): string | undefined => {
      if (provider === "twilio") {
        return Option.isNone(config.twilioAccountSid) || Option.isNone(config.twilioAuthToken) ? "TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN" : undefined
      }
      if (Option.isNone(config.telnyxApiKey)) return "TELNYX_API_KEY"
      return Option.isNone(config.telnyxConnectionId) ? "TELNYX_CONNECTION_ID" : undefined
    }

    /** Closes the record of a call that ended unanswered and queues its session.ended. */
    const closeUnanswered = (call: Placed, reason: UnansweredReason) =>
      Effect.gen(function* () {
        const stored = yield* sessions
          .finish(call.agentId, call.sessionId, { status: "failed", endReason: reason, endedAt: yield* nowDate })
          .pipe(
            Effect.retry(storeRetry),
            Effect.tapError((error) => Effect.logError("could not record the outbound call's end", { error: error.message })),
            Effect.orElseSucceed(() => Option.none<Session>())
          )
        if (Option.isSome(stored)) {
          yield* outbox.enqueue(sessionEndedEvent(stored.value)).pipe(
            Effect.retry(storeRetry),
            Effect.tapError((error) => Effect.logError("could not queue session.ended", { error: error.message })),
            Effect.ignore
          )
        }
        yield* Effect.logInfo("outbound call ended unanswered", { sessionId: call.sessionId, endReason: reason })
        return stored
      })

    /**
     * Ends a call that was not answered, once; does nothing (none) when it is live already (the
     * stream opened it) or over. Synchronous up to the decision, so a status callback and a stream
     * cannot both win.
     */
    const endUnanswered = (call: Placed, reason: UnansweredReason) =>
      Effect.suspend(() => {
        if (call.phase === "live" || call.phase === "ended") return Effect.succeed(Option.none<Session>())
        if (!registry.withdrawOutbound(call.sessionId)) return Effect.succeed(Option.none<Session>())
        call.phase = "ended"
        release(call)
        return closeUnanswered(call, reason)
      })

    /** Stops the call at the carrier (best effort) before callgate forgets it. */
    const stopAtCarrier = (call: Placed) =>
      call.call === undefined
        ? Effect.void
        : Effect.either(carriers.cancel(call.call)).pipe(
            Effect.flatMap((stopped) =>
              stopped._tag === "Left" ? Effect.logWarning("stopping the outbound call at the carrier failed", { sessionId: call.sessionId, error: stopped.left.message }) : Effect.void
            )
          )

    /** Neither an ending nor the stream came in time (OUTBOUND_ANSWER_GRACE past the ring timeout). */
    const giveUp = (call: Placed) =>
      Effect.gen(function* () {
        const reason: UnansweredReason = call.phase === "answered" ? "carrier_failed" : "no_answer"
        if (!registry.withdrawOutbound(call.sessionId)) return
        call.phase = "ended"
        release(call)
        yield* Effect.logWarning("outbound call: no ending reported by the carrier in time; giving up", { sessionId: call.sessionId, endReason: reason })
        yield* stopAtCarrier(call)
        yield* closeUnanswered(call, reason)
      })

    /** The stream of the answered call opened its session: the slot is held until it ends. */
    const opened = (call: Placed) => (live: LiveSession) => {
      call.phase = "live"
      runFork(live.settled.pipe(Effect.ensuring(Effect.sync(() => release(call)))))
    }

    const entryQuery = (agentId: string, environmentId: string, sessionId: string) =>
      new URLSearchParams({ agentId, environmentId, sessionId }).toString()

    const place = Effect.fn("OutboundCalls.place")(function* (agentId: string, environmentId: string, body: PlaceCallBody) {
      const env = yield* environments.get(agentId, environmentId)
      const provider = body.provider ?? config.outboundDefaultProvider
      const missing = missingFor(provider)
      if (missing !== undefined) return yield* Effect.fail(new OutboundNotConfigured({ provider, missing }))

      // A place in the fleet's count (an atomic lease in the store), taken before the carrier is
      // asked, so concurrent requests on any instance cannot both pass.
      const sessionId = newSessionId()
      const lease = yield* leases.acquire(
        { agentId, environmentId, sessionId, kind: "outbound" },
        { total: env.maxConcurrentCalls ?? null, outbound: env.maxConcurrentOutboundCalls },
        { hold: true }
      )
      if (lease._tag === "Refused") return yield* Effect.fail(new TooManyOutboundCalls({ environmentId, limit: lease.max, setting: lease.limit }))

      const kind: CallKind = provider === "twilio" ? "twilio" : "telnyx-call-control"
      const machineDetection = body.machineDetection ?? "off"
      const call: Placed = { sessionId, agentId, environmentId, kind, call: undefined, phase: "placing", machineDetection, verdict: undefined }
      placed.set(sessionId, call)
      const createdAt = yield* nowDate
      const metadata = body.metadata !== undefined ? { ...body.metadata } : undefined
      registry.expectOutbound(sessionId, { agentId, environmentId, createdAt, metadata, opened: opened(call) })

      const record: Session = {
        id: sessionId,
        agentId,
        environmentId,
        provider,
        callId: "",
        from: body.from,
        to: body.to,
        direction: "outbound",
        createdAt: createdAt.toISOString(),
        endedAt: null,
        status: "queued",
        endReason: null,
        turns: [],
        fallback: null,
        ...(metadata !== undefined ? { metadata } : {})
      }
      const recorded = yield* Effect.either(sessions.record(record).pipe(Effect.retry(storeRetry)))
      if (recorded._tag === "Left") {
        registry.withdrawOutbound(sessionId)
        release(call)
        return yield* Effect.fail(recorded.left)
      }

      const query = entryQuery(agentId, environmentId, sessionId)
      const base = publicUrl.current()
      const timeoutSeconds = body.timeoutSeconds ?? DEFAULT_RING_TIMEOUT_SECONDS
      const dialed = yield* Effect.either(
        carriers.place({
          kind,
          to: body.to,
          from: body.from,
          answerUrl: `${base}${kind === "twilio" ? EntryPaths.twilioVoice : EntryPaths.telnyxCallControl}?${query}`,
          statusUrl: `${base}${EntryPaths.twilioStatus}?${query}`,
          timeoutSeconds,
          machineDetection: machineDetection === "off" ? undefined : { mode: machineDetection, resultUrl: `${base}${EntryPaths.twilioAmd}?${query}` }
        })
      )
      if (dialed._tag === "Left") {
        yield* endUnanswered(call, "carrier_failed")
        return yield* Effect.fail(new OutboundPlacementFailed({ sessionId, detail: dialed.left.message }))
      }
      call.call = dialed.right
      byCallId.set(dialed.right.callId, sessionId)
      const expectation = registry.outboundExpectation(sessionId)
      if (Option.isSome(expectation)) expectation.value.callId = dialed.right.callId
      if (call.phase === "placing") call.phase = "queued"
      const updated = yield* sessions
        .update(agentId, sessionId, (current) => ({ ...current, callId: dialed.right.callId }))
        .pipe(Effect.retry(storeRetry), Effect.orElseSucceed(() => Option.none<Session>()))
      yield* Effect.logInfo("outbound call placed", { sessionId, provider, callId: dialed.right.callId })
      // Should the carrier's reports be lost, the call must not hold its slot (and its session stay open) for ever.
      runFork(
        Effect.sleep(Duration.sum(Duration.seconds(timeoutSeconds), config.outboundAnswerGrace)).pipe(
          Effect.zipRight(Effect.suspend(() => (call.phase === "live" || call.phase === "ended" ? Effect.void : giveUp(call))))
        )
      )
      return Option.getOrElse(updated, () => ({ ...record, callId: dialed.right.callId }))
    })

    /** A Twilio status callback for a call placed here (signature checked by the caller). */
    const twilioStatus = Effect.fn("OutboundCalls.twilioStatus")(function* (sessionId: string, callSid: string, status: string) {
      const call = placed.get(sessionId)
      if (call === undefined || call.call?.callId !== callSid) return
      if (status === "ringing") {
        if (call.phase !== "queued" && call.phase !== "placing") return
        call.phase = "ringing"
        yield* sessions
          .update(call.agentId, sessionId, (current) => (current.status === "queued" ? { ...current, status: "ringing" } : current))
          .pipe(Effect.retry(storeRetry), Effect.ignore)
        return
      }
      if (TWILIO_PROGRESS.has(status)) {
        if (status === "in-progress" || status === "answered") call.phase = call.phase === "live" ? "live" : "answered"
        return
      }
      const reason = twilioUnanswered(status)
      if (reason !== undefined) yield* endUnanswered(call, reason)
    })

    /**
     * The carrier's machine-detection verdict for a call placed here: to the agent (in `start` or
     * as an `amd` message: LiveCalls.machineVerdict) and onto the session record. The first
     * verdict stands; one for a call this instance no longer holds is ignored.
     */
    const machineVerdict = (call: Placed, verdict: MachineVerdict) =>
      Effect.suspend(() => {
        if (call.verdict !== undefined || call.machineDetection === "off") return Effect.void
        call.verdict = verdict
        registry.machineVerdict(call.sessionId, verdict)
        return sessions.update(call.agentId, call.sessionId, (current) => ({ ...current, ...verdictFields(verdict) })).pipe(
          Effect.retry(storeRetry),
          Effect.ignore,
          Effect.zipRight(Effect.logInfo("outbound call: machine detection", { sessionId: call.sessionId, answeredBy: verdict.answeredBy, detail: verdict.detail }))
        )
      })

    /** Twilio's asynchronous AMD callback (AnsweredBy) for a call placed here (signature checked by the caller). */
    const twilioAmd = Effect.fn("OutboundCalls.twilioAmd")(function* (sessionId: string, callSid: string, answeredBy: string) {
      const call = placed.get(sessionId)
      if (call === undefined || call.call?.callId !== callSid) return
      yield* machineVerdict(call, twilioVerdict(answeredBy))
    })

    /**
     * Telnyx's call.machine.* webhooks. With detect-message-end (greeting_end) a machine's verdict
     * waits for the end of its greeting, as Twilio's DetectMessageEnd does; a person's is at once.
     */
    const telnyxMachine = (call: Placed, stage: "detection" | "greeting", result: string) => {
      if (stage === "greeting") return machineVerdict(call, { answeredBy: "machine", detail: `greeting_${result}` })
      const answeredBy = telnyxAnsweredBy(result)
      if (answeredBy === "machine" && call.machineDetection === "detect-message-end") return Effect.void
      return machineVerdict(call, { answeredBy, detail: result })
    }

    /**
     * Cancels a call not answered yet (Twilio Status=canceled, Telnyx hangup) or hangs up a live
     * one; a call already over is answered as it stands.
     */
    const cancel = Effect.fn("OutboundCalls.cancel")(function* (agentId: string, environmentId: string, sessionId: string) {
      const call = placed.get(sessionId)
      if (call !== undefined && call.agentId === agentId && call.environmentId === environmentId && call.phase !== "live" && call.phase !== "ended") {
        if (registry.withdrawOutbound(sessionId)) {
          call.phase = "ended"
          release(call)
          yield* stopAtCarrier(call)
          const stored = yield* closeUnanswered(call, "canceled")
          if (Option.isSome(stored)) return stored.value
        }
      }
      const live = registry.live(sessionId)
      if (Option.isSome(live) && live.value.info.agentId === agentId && live.value.info.environmentId === environmentId) {
        live.value.end(SessionEnding.Completed({ reason: "api_hangup" }))
        const record = yield* live.value.settled
        if (Option.isSome(record)) return record.value
      }
      const stored = yield* sessions.get(agentId, sessionId)
      if (stored.environmentId !== environmentId) return yield* Effect.fail(new SessionNotFound({ agentId, sessionId }))
      return stored
    })

    // At shutdown, calls still ringing are canceled: their answer would find no instance to serve it.
    yield* Effect.addFinalizer(() =>
      Effect.forEach(
        [...placed.values()].filter((call) => call.phase !== "live" && call.phase !== "ended"),
        (call) =>
          Effect.suspend(() => {
            if (!registry.withdrawOutbound(call.sessionId)) return Effect.void
            call.phase = "ended"
            release(call)
            return stopAtCarrier(call).pipe(Effect.zipRight(closeUnanswered(call, "canceled")))
          }),
        { concurrency: 8, discard: true }
      ).pipe(Effect.timeout(Duration.seconds(15)), Effect.ignore)
    )

    // Telnyx reports an unanswered call's end as call.hangup (the Call Control entry publishes it).
    const hangups = yield* callEvents.subscribe
    yield* Queue.take(hangups).pipe(
      Effect.flatMap((event) => {
        const sessionId = byCallId.get(event.callId)
        const call = sessionId !== undefined ? placed.get(sessionId) : undefined
        if (call === undefined || call.kind === "twilio") return Effect.void
        return event._tag === "CallHungUp" ? endUnanswered(call, telnyxUnanswered(event.cause)) : telnyxMachine(call, event.stage, event.result)
      }),
      Effect.catchAllCause((cause) => Effect.logError("handling a Telnyx hangup of an outbound call failed", cause)),
      Effect.forever,
      Effect.forkScoped
    )

    return { place, twilioStatus, twilioAmd, cancel } as const
  })
}) {}
