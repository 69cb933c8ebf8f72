import { Effect, Queue, Scope } from "effect"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { SessionEndJournal } from "../../src/sessions/SessionEndJournal.js"
import type { Session } from "../../src/sessions/SessionSchema.js"
import { Sessions } from "../../src/sessions/Sessions.js"
import { TransferOutcomes } from "../../src/sessions/TransferOutcomes.js"
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
  const liveSession = async () => {
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
      callKind: "twilio"
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
      Effect.flatMap(TransferOutcomes, (outcomes) => outcomes.settle(ref, { status: "no-answer", carrierStatus: "no-answer" }, { returnCaller: true }))
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
      Effect.flatMap(TransferOutcomes, (outcomes) => outcomes.settle(ref, { status: "no-answer", carrierStatus: "no-answer" }, { returnCaller: true }))
    )
    expect(settled._tag === "Some" && settled.value.reopened).toBe(false)
    expect(await stored(ref)).toMatchObject({ status: "failed" })
    await until(() => events.some((e) => e.sessionId === ref.sessionId), "session.ended with the outcome")
  })
})
