import { Effect, Queue, Scope } from "effect"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { CallSettlement } from "../../src/livecall/CallSettlement.js"
import { OrphanReconciler, sessionInfoOf } from "../../src/recovery/OrphanReconciler.js"
import { SessionEndJournal } from "../../src/sessions/SessionEndJournal.js"
import type { Session } from "../../src/sessions/SessionSchema.js"
import { Sessions } from "../../src/sessions/Sessions.js"
import { RETURN_STREAM_TIMEOUT, TransferOutcomes } from "../../src/sessions/TransferOutcomes.js"
import { Deliveries } from "../../src/webhooks/Deliveries.js"
import type { SessionEndedEvent } from "../../src/webhooks/SessionEndedEvent.js"
import { until } from "../livecall/callHarness.js"
import { makeTestApp, type StoreKind, type TestApp, uniqueId } from "../support/testApp.js"

/**
 * TransferOutcomes on the production graph over the TestClock (docs/fallback.md, "Transfer
 * outcomes", "When the outcome never comes"): whichever comes last of the session's end and the
 * transfer's outcome queues the one session.ended, and a transfer whose outcome never comes is
 * closed at its bound, with exactly one session.ended, its times exact on the TestClock.
 */
/** Tests that move the clock past the return path's 310 s run every periodic task of the app that long: minutes of work on a busy machine. */
const LONG_CLOCK_TEST = 300_000

describe.each<StoreKind>(["memory", "redis"])("transfer outcomes (%s store)", (kind) => {
  let t: TestApp
  let events: Array<SessionEndedEvent>
  beforeEach(async () => {
    // TRANSFER_RING_TIMEOUT 20 s: unanswered, closed at 20 + 10 s; answered, SESSION_MAX_DURATION 1 m + 10 s after the answer.
    t = await makeTestApp(kind, { TRANSFER_RING_TIMEOUT: "20s", SESSION_MAX_DURATION: "1m" }, { clock: "test" })
    events = []
    await t.runtime.runPromise(
      Effect.gen(function* () {
        const subscription = yield* (yield* Deliveries).acceptedEvents
        yield* Queue.take(subscription).pipe(
          Effect.tap((event) => Effect.sync(() => void events.push(event))),
          Effect.forever,
          Effect.forkDaemon
        )
      }).pipe(Effect.provideServiceEffect(Scope.Scope, Scope.make()))
    )
  })
  afterEach(() => t.close())

  const run = <A, E>(effect: Effect.Effect<A, E, any>) => t.runtime.runPromise(effect as Effect.Effect<A, E, never>)

  /** A live session's record, and the job that ends it (failed, the phone fallback ran). */
  const liveSession = async (instanceId?: string) => {
    const agentId = uniqueId("agent")
    const sessionId = uniqueId("ses")
    const now = await run(Effect.map(Effect.clockWith((clock) => clock.currentTimeMillis), (ms) => new Date(ms).toISOString()))
    const session: Session = {
      id: sessionId,
      agentId,
      environmentId: "env_transfer",
      provider: "twilio",
      callId: `CA${sessionId.replace(/[^A-Za-z0-9]/g, "")}`,
      from: "+14155550100",
      to: "+14155550199",
      direction: "inbound",
      createdAt: now,
      endedAt: null,
      status: "active",
      endReason: null,
      turns: [],
      fallback: null,
      callKind: "twilio",
      ...(instanceId !== undefined ? { instanceId } : {})
    }
    await run(Effect.flatMap(Sessions, (sessions) => sessions.record(session)))
    return { ref: { agentId, sessionId }, session }
  }

  const endSession = (session: Session, pending: Session["pendingTransfer"]) =>
    run(
      Effect.flatMap(SessionEndJournal, (journal) =>
        journal.submit({
          session: {
            ...session,
            status: "failed",
            endReason: "agent_disconnected",
            endedAt: session.createdAt,
            ...(pending !== undefined ? { pendingTransfer: pending } : {})
          }
        })
      )
    )

  const begin = (ref: { agentId: string; sessionId: string }) =>
    run(
      Effect.flatMap(TransferOutcomes, (outcomes) =>
        outcomes.begin(ref, { to: "+14155550123", initiatedBy: "fallback", failedMessage: "Sorry." }, "twilio")
      )
    )

  const stored = (ref: { agentId: string; sessionId: string }) => run(Effect.flatMap(Sessions, (sessions) => sessions.get(ref.agentId, ref.sessionId)))

  it("tracks where the carrier reports: the Twilio paths, the ring timeout in whole seconds", async () => {
    const { ref } = await liveSession()
    const begun = await begin(ref)
    const query = `agentId=${ref.agentId}&sessionId=${ref.sessionId}`
    const escaped = query.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
    expect(begun!.tracking.outcomeUrl).toMatch(new RegExp(`^https?://[^/]+/telephony/twilio/transfer-outcome\\?${escaped}$`))
    expect(begun!.tracking.progressUrl).toMatch(new RegExp(`^https?://[^/]+/telephony/twilio/transfer-progress\\?${escaped}$`))
    expect(begun!.tracking.callControlEventsUrl).toMatch(new RegExp(`^https?://[^/]+/telephony/telnyx/transfer-events\\?${escaped}$`))
    expect(begun!.tracking.timeoutSeconds).toBe(20)
    expect((await stored(ref)).pendingTransfer).toEqual(begun!.pending)
  })

  it("no outcome ever: closed failed at TRANSFER_RING_TIMEOUT + 10 s, exactly one session.ended", async () => {
    const { ref, session } = await liveSession()
    const begun = await begin(ref)
    await endSession(session, begun!.pending)
    // Ended with the transfer pending: no session.ended (the end's write decided it, before it returned).
    expect(events.filter((e) => e.sessionId === ref.sessionId)).toHaveLength(0)
    await t.adjustClock("29999 millis")
    expect((await stored(ref)).pendingTransfer).toBeDefined()
    await t.adjustClock("1 millis")
    await until(() => events.some((e) => e.sessionId === ref.sessionId), "session.ended at the bound")
    const [event, ...more] = events.filter((e) => e.sessionId === ref.sessionId)
    expect(more).toHaveLength(0)
    expect(event!.transfers).toEqual([
      {
        to: "+14155550123",
        initiatedBy: "fallback",
        status: "failed",
        ringMs: 30_000,
        talkMs: 0,
        startedAt: begun!.pending.startedAt,
        endedAt: new Date(Date.parse(begun!.pending.startedAt) + 30_000).toISOString(),
        carrierStatus: null,
        transferFailedMessage: false
      }
    ])
    expect((await stored(ref)).pendingTransfer).toBeUndefined()
  })

  it("answered, then no end ever: closed answered SESSION_MAX_DURATION + 10 s after the answer, exactly one session.ended", async () => {
    const { ref, session } = await liveSession()
    const begun = await begin(ref)
    await endSession(session, begun!.pending)
    await t.adjustClock("5 seconds")
    await run(Effect.flatMap(TransferOutcomes, (outcomes) => outcomes.answered(ref)))
    // Past the ring bound: an answered transfer is not closed there.
    await t.adjustClock("25 seconds")
    expect((await stored(ref)).pendingTransfer).toMatchObject({ answeredAt: new Date(Date.parse(begun!.pending.startedAt) + 5000).toISOString() })
    expect(events.filter((e) => e.sessionId === ref.sessionId)).toHaveLength(0)
    await t.adjustClock("45 seconds") // 5 s + 70 s: the answer + 1 m + 10 s
    await until(() => events.some((e) => e.sessionId === ref.sessionId), "session.ended at the talk bound")
    const ended = events.filter((e) => e.sessionId === ref.sessionId)
    expect(ended).toHaveLength(1)
    expect(ended[0]!.transfers).toMatchObject([{ status: "answered", ringMs: 5000, talkMs: 70_000, carrierStatus: null }])
  })

  it("the outcome before the session's end: the end queues the one session.ended, with the outcome", async () => {
    const { ref, session } = await liveSession()
    const begun = await begin(ref)
    await t.adjustClock("3 seconds")
    const settled = await run(
      Effect.flatMap(TransferOutcomes, (outcomes) => outcomes.settle(ref, { status: "busy", carrierStatus: "busy" }))
    )
    expect(settled._tag).toBe("Some")
    // Still live: nothing is sent yet.
    expect(events.filter((e) => e.sessionId === ref.sessionId)).toHaveLength(0)
    await endSession(session, begun!.pending)
    await until(() => events.some((e) => e.sessionId === ref.sessionId), "session.ended with the end")
    const ended = events.filter((e) => e.sessionId === ref.sessionId)
    expect(ended).toHaveLength(1)
    expect(ended[0]!.transfers).toMatchObject([{ status: "busy", ringMs: 3000, talkMs: 0, carrierStatus: "busy", transferFailedMessage: true }])
    // A late report finds nothing pending, and the bound finds nothing to close.
    await run(Effect.flatMap(TransferOutcomes, (outcomes) => outcomes.settle(ref, { status: "failed", carrierStatus: "failed" })))
    await t.adjustClock("1 minute")
    expect((await stored(ref)).transfers).toHaveLength(1)
    expect(events.filter((e) => e.sessionId === ref.sessionId)).toHaveLength(1)
  })
  it("an agent's transfer not answered, reported where the caller can come back: the session re-opens with no session.ended; the late end of the stay that made it leaves it open; the next end sends the one", async () => {
    const { ref, session } = await liveSession()
    const begun = await run(
      Effect.flatMap(TransferOutcomes, (outcomes) =>
        outcomes.begin(ref, { to: "+14155550123", initiatedBy: "agent", failedMessage: null }, "twilio")
      )
    )
    // The carrier's no-answer at the 20 s ring timeout (before callgate's own bound at 30 s).
    await t.adjustClock("20 seconds")
    const settled = await run(
      Effect.flatMap(TransferOutcomes, (outcomes) => outcomes.settle(ref, { status: "no-answer", carrierStatus: "no-answer" }, { returnCaller: { within: "5 minutes" } }))
    )
    expect(settled._tag === "Some" && settled.value.reopened).toBe(true)
    expect(await stored(ref)).toMatchObject({ status: "active", endedAt: null, endReason: null, transfers: [{ initiatedBy: "agent", status: "no-answer", ringMs: 20_000 }] })
    // The stay that made the transfer ends only now (the number failed at once): the re-opened session is the caller's new stay.
    await endSession(session, begun!.pending)
    expect(await stored(ref)).toMatchObject({ status: "active", endedAt: null })
    expect(events.filter((e) => e.sessionId === ref.sessionId)).toHaveLength(0)
    // The new stay's end: the one session.ended, with the transfer.
    await run(
      Effect.flatMap(SessionEndJournal, (journal) =>
        journal.submit({ session: { ...session, status: "completed", endReason: "caller_hangup", endedAt: session.createdAt } })
      )
    )
    await until(() => events.some((e) => e.sessionId === ref.sessionId), "session.ended at the new stay's end")
    const ended = events.filter((e) => e.sessionId === ref.sessionId)
    expect(ended).toHaveLength(1)
    expect(ended[0]).toMatchObject({ status: "completed", endReason: "caller_hangup", transfers: [{ initiatedBy: "agent", status: "no-answer" }] })
  })

  it("a fallback transfer not answered re-opens nothing, even reported where the caller could come back", async () => {
    const { ref, session } = await liveSession()
    const begun = await begin(ref)
    await endSession(session, begun!.pending)
    const settled = await run(
      Effect.flatMap(TransferOutcomes, (outcomes) => outcomes.settle(ref, { status: "no-answer", carrierStatus: "no-answer" }, { returnCaller: { within: "5 minutes" } }))
    )
    expect(settled._tag === "Some" && settled.value.reopened).toBe(false)
    expect(await stored(ref)).toMatchObject({ status: "failed" })
    await until(() => events.some((e) => e.sessionId === ref.sessionId), "session.ended with the outcome")
  })

  const endedFor = (ref: { sessionId: string }) => events.filter((e) => e.sessionId === ref.sessionId)
  const ownedBy = (instanceId: string) => run(Effect.flatMap(Sessions, (sessions) => sessions.ownedBy(instanceId)))

  /** An agent's transfer (begun 20 s ago, this instance's own) reported not answered where the caller comes back: the session re-opened. */
  const reopenedSession = async (instanceId?: string) => {
    const { ref, session } = await liveSession(instanceId)
    await run(
      Effect.flatMap(TransferOutcomes, (outcomes) => outcomes.begin(ref, { to: "+14155550123", initiatedBy: "agent", failedMessage: null }, "twilio"))
    )
    await t.adjustClock("20 seconds")
    const settled = await run(
      Effect.flatMap(TransferOutcomes, (outcomes) =>
        outcomes.settle(ref, { status: "no-answer", carrierStatus: "no-answer" }, { returnCaller: { within: "5 minutes" } })
      )
    )
    expect(settled._tag === "Some" && settled.value.reopened).toBe(true)
    return { ref, session, answeredAt: Date.parse(session.createdAt) + 20_000 }
  }

  it("the caller never comes back on the return path's stream: ended failed / return_stream_timeout at the token's life + 10 s, not before, with one session.ended", async () => {
    const { ref, answeredAt } = await reopenedSession()
    // The deadline is on the record, so any instance can keep it.
    expect(await stored(ref)).toMatchObject({ status: "active", awaitingStreamUntil: new Date(answeredAt + 310_000).toISOString() })
    await t.adjustClock("309999 millis")
    expect(await stored(ref)).toMatchObject({ status: "active", endedAt: null })
    expect(endedFor(ref)).toHaveLength(0)
    await t.adjustClock("1 millis")
    await until(() => endedFor(ref).length > 0, "session.ended at the return deadline")
    const session = await stored(ref)
    expect(session).toMatchObject({ status: "failed", endReason: RETURN_STREAM_TIMEOUT, endedAt: new Date(answeredAt).toISOString() })
    expect(session.awaitingStreamUntil).toBeUndefined()
    const [event, ...more] = endedFor(ref)
    expect(more).toHaveLength(0)
    expect(event).toMatchObject({ status: "failed", endReason: RETURN_STREAM_TIMEOUT, transfers: [{ initiatedBy: "agent", status: "no-answer", ringMs: 20_000 }] })
    // Nothing more later.
    await t.adjustClock("10 minutes")
    expect(endedFor(ref)).toHaveLength(1)
  }, LONG_CLOCK_TEST)

  it("the caller back on the return path's stream in time: the deadline passes without ending the session", async () => {
    const { ref, session } = await reopenedSession()
    await t.adjustClock("4 minutes")
    // The stream opens: the session is adopted by the instance it reached (CallSettlement.adopt).
    await run(Effect.flatMap(CallSettlement, (settlement) => settlement.adopt(sessionInfoOf({ ...session, status: "active" }))))
    expect((await stored(ref)).awaitingStreamUntil).toBeUndefined()
    await t.adjustClock("2 minutes")
    expect(await stored(ref)).toMatchObject({ status: "active", endedAt: null })
    // Its own end sends the one session.ended.
    await run(
      Effect.flatMap(SessionEndJournal, (journal) =>
        journal.submit({ session: { ...session, status: "completed", endReason: "caller_hangup", endedAt: session.createdAt } })
      )
    )
    await until(() => endedFor(ref).length > 0, "session.ended at the call's end")
    expect(endedFor(ref)).toHaveLength(1)
    expect(endedFor(ref)[0]).toMatchObject({ endReason: "caller_hangup", transfers: [{ status: "no-answer" }] })
  }, LONG_CLOCK_TEST)

  it("ended with a transfer pending, the session stays owned by its instance until the outcome lets go of it", async () => {
    const owner = uniqueId("inst")
    const { ref, session } = await liveSession(owner)
    const begun = await begin(ref)
    await endSession(session, begun!.pending)
    expect(await ownedBy(owner)).toEqual([ref])
    await run(Effect.flatMap(TransferOutcomes, (outcomes) => outcomes.settle(ref, { status: "busy", carrierStatus: "busy" })))
    await until(() => endedFor(ref).length > 0, "session.ended with the outcome")
    expect(await ownedBy(owner)).toEqual([])
  })

  /**
   * The instance that made the transfer died and the carrier's report is lost: its record as that
   * instance left it (ended, the transfer pending, owned by it), no watch running anywhere.
   */
  const leftByDeadInstance = async (dead: string, ageMs: number, answeredAfterMs?: number) => {
    const { ref, session } = await liveSession(dead)
    const startedAt = new Date(Date.parse(session.createdAt) - ageMs).toISOString()
    const pending = {
      to: "+14155550123",
      initiatedBy: "agent" as const,
      startedAt,
      answeredAt: answeredAfterMs === undefined ? null : new Date(Date.parse(startedAt) + answeredAfterMs).toISOString(),
      failedMessage: null
    }
    await run(
      Effect.flatMap(Sessions, (sessions) =>
        sessions.record({ ...session, status: "completed", endReason: "agent_transfer", endedAt: startedAt, pendingTransfer: pending })
      )
    )
    return { ref, pending }
  }

  const reconcile = (dead: string) => run(Effect.flatMap(OrphanReconciler, (reconciler) => reconciler.reconcileOrphans(dead)))

  it("its instance died and no report comes: a survivor's reconciliation watches the transfer and closes it failed at TRANSFER_RING_TIMEOUT + 10 s after it began, with one session.ended", async () => {
    const dead = uniqueId("dead")
    // Begun 12 s before the survivor reconciles: 18 s of its 30 s bound left.
    const { ref, pending } = await leftByDeadInstance(dead, 12_000)
    expect(await reconcile(dead)).toEqual({ rescued: 0, finished: 0, skipped: 0, watched: 1 })
    // A second survivor's sweep (or the same one again) watches the same deadline; one closes it.
    expect(await reconcile(dead)).toMatchObject({ watched: 1 })
    await t.adjustClock("17999 millis")
    expect((await stored(ref)).pendingTransfer).toEqual(pending)
    expect(endedFor(ref)).toHaveLength(0)
    await t.adjustClock("1 millis")
    await until(() => endedFor(ref).length > 0, "session.ended at the transfer's bound")
    const [event, ...more] = endedFor(ref)
    expect(more).toHaveLength(0)
    expect(event).toMatchObject({
      status: "completed",
      endReason: "agent_transfer",
      transfers: [{ initiatedBy: "agent", status: "failed", carrierStatus: null, ringMs: 30_000, talkMs: 0, startedAt: pending.startedAt }]
    })
    expect(await ownedBy(dead)).toEqual([])
    expect(await reconcile(dead)).toEqual({ rescued: 0, finished: 0, skipped: 0, watched: 0 })
    await t.adjustClock("1 minute")
    expect(endedFor(ref)).toHaveLength(1)
  })

  it("its instance died long ago: the reconciliation closes an overdue transfer at once; an answered one at SESSION_MAX_DURATION + 10 s after the answer", async () => {
    const dead = uniqueId("dead")
    const overdue = await leftByDeadInstance(dead, 45_000)
    const answered = await leftByDeadInstance(dead, 40_000, 5_000)
    expect(await reconcile(dead)).toMatchObject({ watched: 2 })
    await until(() => endedFor(overdue.ref).length > 0, "session.ended of the overdue transfer")
    expect(endedFor(overdue.ref)[0]!.transfers).toMatchObject([{ status: "failed", carrierStatus: null }])
    // Answered 35 s ago: 35 s of its 70 s bound left.
    await t.adjustClock("34999 millis")
    expect(endedFor(answered.ref)).toHaveLength(0)
    await t.adjustClock("1 millis")
    await until(() => endedFor(answered.ref).length > 0, "session.ended of the answered transfer")
    expect(endedFor(answered.ref)).toHaveLength(1)
    expect(endedFor(answered.ref)[0]!.transfers).toMatchObject([{ status: "answered", carrierStatus: null, ringMs: 5_000, talkMs: 70_000 }])
    expect(await ownedBy(dead)).toEqual([])
  })

  it("its instance died, then the carrier's report comes after all: the report ends it, the survivor's watch finds nothing", async () => {
    const dead = uniqueId("dead")
    const { ref } = await leftByDeadInstance(dead, 5_000)
    expect(await reconcile(dead)).toMatchObject({ watched: 1 })
    await run(Effect.flatMap(TransferOutcomes, (outcomes) => outcomes.settle(ref, { status: "busy", carrierStatus: "busy" })))
    await until(() => endedFor(ref).length > 0, "session.ended with the report")
    await t.adjustClock("1 minute")
    expect(endedFor(ref)).toHaveLength(1)
    expect(endedFor(ref)[0]!.transfers).toMatchObject([{ status: "busy", carrierStatus: "busy" }])
    expect(await ownedBy(dead)).toEqual([])
  })

  it("its instance died with the caller on the way back (re-opened, no stream yet): the survivor keeps the return deadline instead of rescuing", async () => {
    const dead = uniqueId("dead")
    const { ref, answeredAt } = await reopenedSession(dead)
    // This test's app stands for both (it re-opened the session, then reconciles for the dead id): the
    // reconciliation neither claims nor rescues the active session, and one deadline fiber runs for it.
    expect(await reconcile(dead)).toEqual({ rescued: 0, finished: 0, skipped: 0, watched: 1 })
    expect(await stored(ref)).toMatchObject({ status: "active", fallback: null })
    await t.adjustClock("309999 millis")
    expect((await stored(ref)).status).toBe("active")
    await t.adjustClock("1 millis")
    await until(() => endedFor(ref).length > 0, "session.ended at the return deadline")
    expect(endedFor(ref)).toHaveLength(1)
    expect(endedFor(ref)[0]).toMatchObject({ status: "failed", endReason: RETURN_STREAM_TIMEOUT })
    expect(Date.parse((await stored(ref)).endedAt!)).toBe(answeredAt)
    expect(await ownedBy(dead)).toEqual([])
  }, LONG_CLOCK_TEST)
})
