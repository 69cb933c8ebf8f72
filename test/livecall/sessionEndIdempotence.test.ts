import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { Redis } from "ioredis"
import { afterEach, describe, expect, it } from "vitest"
import { Environments } from "../../src/environments/Environments.js"
import { OrphanReconciler } from "../../src/recovery/OrphanReconciler.js"
import { SessionEndJournal } from "../../src/sessions/SessionEndJournal.js"
import { Sessions } from "../../src/sessions/Sessions.js"
import { Deliveries } from "../../src/webhooks/Deliveries.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { type RestartableRedis, startRestartableRedis } from "../support/redisServer.js"
import { makeTestApp, TEST_SECRETS_KEY, type TestApp, type TestAppOptions, uniqueId } from "../support/testApp.js"
import { sampleSession } from "../sessions/SessionStore.contract.js"

/**
 * Every path that ends a session is idempotent (docs/reliability.md, "Idempotence"): a session
 * ended twice, or claimed by several reconcilers at once, has one terminal state, one rescue and
 * one session.ended. A real Redis of its own (it is taken down in the last case).
 */
describe("ending a session twice", () => {
  let redis: RestartableRedis | undefined
  let twilio: FakeTwilio | undefined
  let app: TestApp | undefined

  afterEach(async () => {
    await app?.close()
    await twilio?.close()
    await redis?.stop()
    app = twilio = redis = undefined
  })

  const setUp = async (env: Record<string, string> = {}, options: TestAppOptions = {}) => {
    redis = await startRestartableRedis()
    twilio = await startFakeTwilio()
    app = await makeTestApp("redis", {
      REDIS_URL: redis.url,
      SECRETS_KEY: TEST_SECRETS_KEY,
      DATA_DIR: mkdtempSync(join(tmpdir(), "callgate-idem-")),
      ...twilio.env,
      ...env
    }, options)
    const agentId = uniqueId("agent")
    const environment = await app.runtime.runPromise(
      Effect.flatMap(Environments, (envs) => envs.create(agentId, { name: "idempotence", webhookUrl: "https://hooks.example.com/callgate" }))
    )
    return { app, agentId, environmentId: environment.id, run: app.runtime.runPromise }
  }

  it("three reconcilers racing on one dead instance: one claim, one rescue (one REST hang-up), one session.ended", async () => {
    const { agentId, environmentId, run } = await setUp()
    const dead = uniqueId("dead")
    const orphans = [0, 1, 2].map(() =>
      sampleSession(agentId, { environmentId, instanceId: dead, callKind: "twilio", createdAt: new Date(Date.now() - 60_000).toISOString() })
    )
    await run(Effect.flatMap(Sessions, (sessions) => Effect.forEach(orphans, (s) => sessions.record(s))))

    const reports = await run(
      Effect.flatMap(OrphanReconciler, (r) => Effect.all([r.reconcileOrphans(dead), r.reconcileOrphans(dead), r.reconcileOrphans(dead)], { concurrency: "unbounded" }))
    )
    expect(reports.reduce((n, report) => n + report.rescued, 0)).toBe(3)
    for (const orphan of orphans) {
      expect(twilio!.callUpdates(orphan.callId).map((r) => r.form)).toEqual([{ Status: "completed" }])
      const stored = await run(Effect.flatMap(Sessions, (sessions) => sessions.get(agentId, orphan.id)))
      expect(stored).toMatchObject({ status: "failed", endReason: "instance_lost", fallback: { trigger: "instance_lost", outcome: "hung_up" } })
    }
    const deliveries = await run(Effect.flatMap(Deliveries, (d) => d.list(agentId, environmentId, { limit: 100 })))
    expect(deliveries.deliveries.map((d) => d.sessionId).sort()).toEqual(orphans.map((o) => o.id).sort())
    // Let go of: a later reconciliation finds nothing.
    expect(await run(Effect.flatMap(OrphanReconciler, (r) => r.reconcileOrphans(dead)))).toEqual({ rescued: 0, finished: 0, skipped: 0, watched: 0 })
  })

  it("the same end submitted twice (a replayed spool, a racing survivor): the first ending stays, one session.ended", async () => {
    const { agentId, environmentId, run } = await setUp()
    const session = sampleSession(agentId, { environmentId, instanceId: uniqueId("i") })
    await run(Effect.flatMap(Sessions, (sessions) => sessions.record(session)))
    const endedAt = new Date().toISOString()
    await run(
      Effect.flatMap(SessionEndJournal, (journal) =>
        Effect.zipRight(
          journal.submit({ session: { ...session, status: "completed", endReason: "caller_hangup", endedAt } }),
          journal.submit({ session: { ...session, status: "failed", endReason: "instance_lost", endedAt } })
        )
      )
    )
    expect(await run(Effect.flatMap(Sessions, (sessions) => sessions.get(agentId, session.id)))).toMatchObject({
      status: "completed",
      endReason: "caller_hangup"
    })
    const deliveries = await run(Effect.flatMap(Deliveries, (d) => d.list(agentId, environmentId, { limit: 100 })))
    expect(deliveries.deliveries).toHaveLength(1)
    expect(deliveries.deliveries[0]!.payload).toMatchObject({ endReason: "caller_hangup" })
  })

  it("a rescuer's fallback record that comes while another end of the session is being written is filled in after it, not dropped", async () => {
    // The fleet's sweep finishes a session a survivor had just claimed (terminal, no fallback yet)
    // while that survivor is still rescuing the call; the rescuer's end (fillFallback) comes while
    // the sweep's is kept (the store refuses session writes): once the store takes them, the record has the fallback.
    const prefix = `${uniqueId("fill")}:`
    const { app, agentId, environmentId, run } = await setUp({ REDIS_KEY_PREFIX: prefix }, { clock: "test" })
    const claimed = { ...sampleSession(agentId, { environmentId, instanceId: uniqueId("dead") }), status: "failed" as const, endReason: "instance_lost" as const, endedAt: new Date().toISOString() }
    await run(Effect.flatMap(Sessions, (sessions) => sessions.record(claimed)))
    const admin = new Redis(redis!.url)
    await admin.call("ACL", "SETUSER", "default", "resetkeys", `~${prefix}env:*`)
    const fallback = {
      trigger: "instance_lost" as const,
      errorMessage: "The callgate instance serving the call stopped before the call ended.",
      type: "phone" as const,
      outcome: "transferred" as const,
      startedAt: claimed.endedAt,
      carrierRequestAt: claimed.endedAt,
      finishedAt: claimed.endedAt,
      webhookStatus: null,
      detail: null,
      via: "redirect" as const
    }
    await run(
      Effect.flatMap(SessionEndJournal, (journal) =>
        Effect.zipRight(journal.submit({ session: claimed }), journal.submit({ session: { ...claimed, fallback }, fillFallback: true }))
      )
    )
    expect(await run(Effect.map(SessionEndJournal, (journal) => journal.backlog()))).toBe(1)
    await admin.call("ACL", "SETUSER", "default", "allkeys")
    admin.disconnect()
    for (let step = 0; (await run(Effect.flatMap(Sessions, (sessions) => sessions.get(agentId, claimed.id)))).fallback === null; step++) {
      if (step === 60) throw new Error("the rescuer's fallback was not filled in within a minute of the clock")
      await app.adjustClock("1 second")
    }
    expect(await run(Effect.flatMap(Sessions, (sessions) => sessions.get(agentId, claimed.id)))).toMatchObject({
      status: "failed",
      endReason: "instance_lost",
      fallback: { outcome: "transferred", via: "redirect" }
    })
  })

  it("a session end the store refuses is kept; at SESSION_END_BACKLOG_LIMIT (and only then) the entry answers 503; once written, calls are taken again", async () => {
    const prefix = `${uniqueId("acl")}:`
    // On the TestClock: the kept end is tried again on the journal's retry schedule, as the test moves the clock.
    const { app, agentId, environmentId, run } = await setUp(
      { SESSION_END_BACKLOG_LIMIT: "1", PUBLIC_URL: "https://callgate.test", REDIS_KEY_PREFIX: prefix },
      { clock: "test" }
    )
    const session = sampleSession(agentId, { environmentId, instanceId: uniqueId("i") })
    await run(Effect.flatMap(Sessions, (sessions) => sessions.record(session)))
    const path = `/telephony/twilio/voice?agentId=${agentId}&environmentId=${environmentId}`
    const form = { CallSid: "CA00000000000000000000000000000001", AccountSid: twilio!.accountSid }
    const entry = () =>
      app.app.inject({
        method: "POST",
        url: path,
        headers: { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": twilio!.sign(`https://callgate.test${path}`, form) },
        payload: new URLSearchParams(form).toString()
      })
    expect((await entry()).statusCode).toBe(200)

    // Redis refuses every key but the environments' (an ACL): session writes fail, call entry still reads its environment.
    const admin = new Redis(redis!.url)
    await admin.call("ACL", "SETUSER", "default", "resetkeys", `~${prefix}env:*`)
    expect((await entry()).statusCode).toBe(200)
    await run(
      Effect.flatMap(SessionEndJournal, (journal) =>
        journal.submit({ session: { ...session, status: "completed", endReason: "caller_hangup", endedAt: new Date().toISOString() } })
      )
    )
    expect(await run(Effect.map(SessionEndJournal, (journal) => journal.backlog()))).toBe(1)
    expect((await entry()).statusCode).toBe(503)

    await admin.call("ACL", "SETUSER", "default", "allkeys")
    admin.disconnect()
    // The retries back off to one every 5 s (kernel/StoreError.ts, untilTheStoreAnswers): the next one writes it.
    for (let step = 0; (await run(Effect.map(SessionEndJournal, (journal) => journal.backlog()))) > 0; step++) {
      if (step === 60) throw new Error("the kept session end was not written within a minute of the clock")
      await app.adjustClock("1 second")
    }
    expect(await run(Effect.flatMap(Sessions, (sessions) => sessions.get(agentId, session.id)))).toMatchObject({ status: "completed" })
    expect((await run(Effect.flatMap(Deliveries, (d) => d.list(agentId, environmentId, { limit: 100 })))).deliveries).toHaveLength(1)
    expect((await entry()).statusCode).toBe(200)
  })
})
