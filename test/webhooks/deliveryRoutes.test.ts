import { Clock, Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { nowIso } from "../../src/kernel/Time.js"
import { Outbox } from "../../src/webhooks/Outbox.js"
import { OutboxStore } from "../../src/webhooks/OutboxStore.js"
import type { SessionEndedEvent } from "../../src/webhooks/SessionEndedEvent.js"
import { adminAuth, makeTestApp, type StoreKind, type TestApp, uniqueId } from "../support/testApp.js"

describe.each<StoreKind>(["memory", "redis"])("/v1 webhook deliveries (%s store)", (kind) => {
  let t: TestApp
  let agentId: string
  let environmentId: string
  const base = () => `/v1/agents/${agentId}/environments/${environmentId}/webhook-deliveries`
  const events: Array<SessionEndedEvent> = []

  beforeAll(async () => {
    // No delivery worker runs here: enqueued deliveries stay pending until a test settles them.
    // On the TestClock: a delivery's times are the Clock's, so "due now" is an exact time.
    t = await makeTestApp(kind, {}, { clock: "test" })
    agentId = uniqueId("agent")
    const created = await t.app.inject({
      method: "POST",
      url: `/v1/agents/${agentId}/environments`,
      headers: adminAuth,
      payload: { name: "prod", webhookUrl: "https://hooks.example.com/callgate" }
    })
    environmentId = created.json().data.id
    for (let i = 0; i < 5; i++) {
      const event: SessionEndedEvent = {
        event: "session.ended",
        sessionId: `ses_${i}`,
        agentId,
        environmentId,
        status: "completed",
        createdAt: new Date().toISOString(),
        direction: "inbound",
        duration: String(10 + i)
      }
      events.push(event)
      await t.runtime.runPromise(Effect.flatMap(Outbox, (outbox) => outbox.enqueue(event)))
      await t.adjustClock("1 millis") // distinct createdAt milliseconds
    }
  })
  afterAll(() => t.close())

  const get = (url: string, headers: Record<string, string> = adminAuth) => t.app.inject({ method: "GET", url, headers })
  const retry = (deliveryId: string, headers: Record<string, string> = adminAuth) =>
    t.app.inject({ method: "POST", url: `${base()}/${deliveryId}/retry`, headers })

  /** Settles one pending delivery through the outbox, as a worker would after a last failed attempt. */
  const exhaust = (deliveryId: string) =>
    t.runtime.runPromise(
      Effect.gen(function* () {
        const store = yield* OutboxStore
        const now = yield* Clock.currentTimeMillis
        for (;;) {
          const batch = yield* store.claim(now + 1000, 10_000, 100, { perHost: 1000, held: new Map() })
          const mine = batch.claims.find((c) => c.delivery.id === deliveryId)
          for (const other of batch.claims.filter((c) => c !== mine)) yield* store.release(other.delivery.id, other.lease, now)
          if (mine === undefined) continue
          yield* store.finish(deliveryId, mine.lease, {
            ...mine.delivery,
            state: "exhausted",
            nextAttemptAt: null,
            reason: "no successful attempt after 1; the last: HTTP 503",
            attempts: [{ attempt: 1, startedAt: now, durationMs: 12, statusCode: 503, error: null, outcome: "exhausted" }]
          })
          return
        }
      })
    )

  it("lists the environment's deliveries newest first, with the payload, state and attempts", async () => {
    const res = await get(base())
    expect(res.statusCode).toBe(200)
    const { deliveries, nextCursor } = res.json().data
    expect(deliveries.map((d: { sessionId: string }) => d.sessionId)).toEqual(["ses_4", "ses_3", "ses_2", "ses_1", "ses_0"])
    expect(nextCursor).toBeNull()
    expect(deliveries[0]).toMatchObject({
      event: "session.ended",
      agentId,
      environmentId,
      state: "pending",
      reason: null,
      attempts: [],
      payload: events[4]
    })
    expect(deliveries[0].id).toMatch(/^dlv_/)
    expect(Date.parse(deliveries[0].createdAt)).not.toBeNaN()
    expect(Date.parse(deliveries[0].nextAttemptAt)).not.toBeNaN()
  })

  it("pages with limit and cursor", async () => {
    const first = (await get(`${base()}?limit=2`)).json().data
    expect(first.deliveries.map((d: { sessionId: string }) => d.sessionId)).toEqual(["ses_4", "ses_3"])
    const second = (await get(`${base()}?limit=2&cursor=${first.nextCursor}`)).json().data
    expect(second.deliveries.map((d: { sessionId: string }) => d.sessionId)).toEqual(["ses_2", "ses_1"])
    const third = (await get(`${base()}?limit=2&cursor=${second.nextCursor}`)).json().data
    expect(third.deliveries.map((d: { sessionId: string }) => d.sessionId)).toEqual(["ses_0"])
    expect(third.nextCursor).toBeNull()
  })

  it.each(["limit=0", "limit=101", "limit=abc", "limit=2.5", "cursor=abc", "cursor=-1", "extra=1"])("refuses the query %s", async (query) => {
    const res = await get(`${base()}?${query}`)
    expect(res.statusCode).toBe(400)
    expect(res.json().error.code).toBe("VALIDATION_FAILED")
  })

  it("answers 404 for an unknown environment, 401 without a key and 403 for another agent's key", async () => {
    expect((await get(`/v1/agents/${agentId}/environments/env_nope/webhook-deliveries`)).statusCode).toBe(404)
    expect((await get(base(), {})).statusCode).toBe(401)
    const key = await t.app.inject({
      method: "POST",
      url: "/v1/api-keys",
      headers: adminAuth,
      payload: { name: "other", agentIds: [uniqueId("agent")] }
    })
    const otherAuth = { authorization: `Bearer ${key.json().data.key}` }
    expect((await get(base(), otherAuth)).statusCode).toBe(403)
    const [one] = (await get(base())).json().data.deliveries
    expect((await retry(one.id, otherAuth)).statusCode).toBe(403)
    expect((await retry(one.id, {})).statusCode).toBe(401)
  })

  it("refuses to retry a pending delivery (409) or an unknown one (404)", async () => {
    const [pending] = (await get(base())).json().data.deliveries
    const conflict = await retry(pending.id)
    expect(conflict.statusCode).toBe(409)
    expect(conflict.json().error.code).toBe("CONFLICT")
    const missing = await retry("dlv_unknown")
    expect(missing.statusCode).toBe(404)
    expect(missing.json().error.code).toBe("NOT_FOUND")
    expect((await retry("not a valid id!")).statusCode).toBe(400)
  })

  it("retries a settled delivery: it is pending again, due now, and a second retry conflicts", async () => {
    const target = (await get(base())).json().data.deliveries.find((d: { sessionId: string }) => d.sessionId === "ses_1")
    await exhaust(target.id)
    const settled = (await get(base())).json().data.deliveries.find((d: { id: string }) => d.id === target.id)
    expect(settled.state).toBe("exhausted")
    expect(settled.attempts).toEqual([
      { attempt: 1, attemptedAt: expect.any(String), durationMs: 12, statusCode: 503, error: null, outcome: "exhausted" }
    ])

    const res = await retry(target.id)
    expect(res.statusCode).toBe(202)
    const requeued = res.json().data
    expect(requeued).toMatchObject({ id: target.id, state: "pending", reason: null })
    expect(requeued.attempts).toHaveLength(1)
    expect(requeued.nextAttemptAt).toBe(await t.runtime.runPromise(nowIso))
    expect((await retry(target.id)).statusCode).toBe(409)
  })

  it("refuses to retry when the environment no longer has a webhook URL (409)", async () => {
    const [one] = (await get(base())).json().data.deliveries
    await exhaust(one.id)
    await t.app.inject({
      method: "PATCH",
      url: `/v1/agents/${agentId}/environments/${environmentId}`,
      headers: adminAuth,
      payload: { webhookUrl: null, webhookSecret: null }
    })
    const res = await retry(one.id)
    expect(res.statusCode).toBe(409)
    expect(res.json().error.message).toContain("no webhook URL")
  })

  it("documents both routes in the OpenAPI document", async () => {
    const doc = (await get("/v1/openapi.json")).json()
    expect(doc.paths["/v1/agents/{agentId}/environments/{environmentId}/webhook-deliveries"].get).toBeDefined()
    expect(doc.paths["/v1/agents/{agentId}/environments/{environmentId}/webhook-deliveries/{deliveryId}/retry"].post).toBeDefined()
  })
})
