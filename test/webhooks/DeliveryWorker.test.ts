import { Effect, Either, Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Environments } from "../../src/environments/Environments.js"
import { Metrics } from "../../src/observability/Metrics.js"
import { EnvironmentStore } from "../../src/environments/EnvironmentStore.js"
import { Webhook } from "standardwebhooks"
import { verifySignature } from "../../src/webhooks/index.js"
import { freePort } from "../support/redisServer.js"
import type { StoreKind } from "../support/testApp.js"
import { eventually, type ReceivedRequest, type Receiver, type Reply, startReceiver } from "./httpsReceiver.js"
import { makeWebhookRuntime } from "./webhookRuntime.js"

const header = (request: ReceivedRequest, name: string) => request.headers[name.toLowerCase()] as string | undefined

const verifies = (request: ReceivedRequest, secret: string) =>
  verifySignature({
    secret,
    signature: request.headers["x-service-signature"],
    timestamp: request.headers["x-service-timestamp"],
    rawBody: request.body
  })

describe.each<StoreKind>(["memory", "redis"])("DeliveryWorker (%s outbox)", (kind) => {
  let t: ReturnType<typeof makeWebhookRuntime>
  /** The same, with a 1 s WEBHOOK_TIMEOUT, for the timeout test. */
  let timing: ReturnType<typeof makeWebhookRuntime>
  let receiver: Receiver
  let elsewhere: Receiver
  /** Per-path replies, so each test owns its receiver behaviour. */
  const replies = new Map<string, (request: ReceivedRequest, index: number) => Reply | Promise<Reply>>()

  beforeAll(async () => {
    // A timeout far above a request's time on a busy machine: an answer never turns into a timeout
    // and a retry because the machine was slow (the timeout test has its own runtime).
    t = makeWebhookRuntime(kind, { WEBHOOK_TIMEOUT: "5s" })
    timing = makeWebhookRuntime(kind, { WEBHOOK_TIMEOUT: "1s" })
    elsewhere = await startReceiver()
    receiver = await startReceiver((request, index) => {
      const path = request.path.split("?")[0]!
      const reply = replies.get(path)
      if (reply) return reply(request, index)
      const status = /^\/status\/(\d{3})$/.exec(path)
      if (status) {
        const code = Number(status[1])
        return code >= 300 && code < 400 ? { status: code, headers: { location: elsewhere.url("/moved") } } : { status: code }
      }
      if (path === "/slow") return { status: 200, delayMs: 20_000 }
      return { status: 200 }
    })
  })
  afterAll(async () => {
    await t.close()
    await timing.close()
    await receiver.close()
    await elsewhere.close()
  })

  const forPath = (path: string) => receiver.requests.filter((r) => r.path === path)

  const deliverTo = async (url: string) => {
    const ids = await t.createEnvironment(url)
    const event = t.sessionEnded(ids)
    await t.enqueue(event)
    const [delivery] = await t.settled(ids)
    return { ids, event, delivery: delivery! }
  }

  it.each([200, 204, 301, 302])("a %i answer delivers at once, without following redirects", async (status) => {
    const { delivery, event, ids } = await deliverTo(receiver.url(`/status/${status}`))
    expect(delivery.state).toBe("delivered")
    expect(delivery.attempts).toHaveLength(1)
    expect(delivery.attempts[0]).toMatchObject({ attempt: 1, statusCode: status, error: null, outcome: "delivered" })
    expect(delivery.payload).toEqual(event)
    expect(forPath(`/status/${status}`).filter((r) => header(r, "x-service-delivery-id") === delivery.id)).toHaveLength(1)
    expect(elsewhere.requests).toHaveLength(0)
    const request = forPath(`/status/${status}`).find((r) => header(r, "x-service-delivery-id") === delivery.id)!
    expect(JSON.parse(request.body.toString())).toEqual(event)
    expect(ids.secret).toBeDefined()
    expect(verifies(request, ids.secret!)).toBe(true)
  })

  it.each([400, 404, 410])("a %i answer fails the delivery for good, with no retry", async (status) => {
    const { delivery } = await deliverTo(receiver.url(`/status/${status}`))
    expect(delivery.state).toBe("failed")
    expect(delivery.reason).toBe(`HTTP ${status}`)
    expect(delivery.attempts).toHaveLength(1)
    expect(delivery.attempts[0]).toMatchObject({ statusCode: status, outcome: "failed" })
    // Nothing comes later: no next attempt is scheduled, and a delivery enqueued after this one
    // runs its whole retry schedule (two delays of about 100 ms, each longer than any retry of
    // this one would have waited) on the same worker without another request for this one.
    expect(delivery.nextAttemptAt).toBeNull()
    const later = await deliverTo(receiver.url("/status/503"))
    expect(later.delivery.attempts).toHaveLength(3)
    expect(forPath(`/status/${status}`).filter((r) => header(r, "x-service-delivery-id") === delivery.id)).toHaveLength(1)
  })

  it.each([500, 503])("a %i answer is retried on the schedule, then the delivery is exhausted", async (status) => {
    const { delivery, ids } = await deliverTo(receiver.url(`/status/${status}`))
    expect(delivery.state).toBe("exhausted")
    expect(delivery.attempts.map((a) => [a.attempt, a.statusCode, a.outcome])).toEqual([
      [1, status, "retry"],
      [2, status, "retry"],
      [3, status, "exhausted"]
    ])
    expect(delivery.reason).toContain(`HTTP ${status}`)
    const requests = forPath(`/status/${status}`).filter((r) => header(r, "x-service-delivery-id") === delivery.id)
    expect(requests.map((r) => header(r, "x-service-attempt"))).toEqual(["1", "2", "3"])
    // The schedule is 100 ms +-20% between attempts (measured from the end of the previous one).
    for (let i = 1; i < requests.length; i++) {
      expect(requests[i]!.receivedAt - requests[i - 1]!.receivedAt).toBeGreaterThanOrEqual(75)
    }
    for (const request of requests) expect(verifies(request, ids.secret!)).toBe(true)
  })

  it("a receiver slower than WEBHOOK_TIMEOUT is a timeout, retried, then exhausted", async () => {
    const ids = await timing.createEnvironment(receiver.url("/slow"))
    await timing.enqueue(timing.sessionEnded(ids))
    const [delivery] = await timing.settled(ids, 1, 20_000)
    expect(delivery!.state).toBe("exhausted")
    expect(delivery!.attempts).toHaveLength(3)
    for (const attempt of delivery!.attempts) {
      expect(attempt.statusCode).toBeNull()
      expect(attempt.durationMs).toBeGreaterThanOrEqual(950)
      // Cut by WEBHOOK_TIMEOUT (1 s), not by any longer limit, long before the receiver's answer at 20 s.
      expect(attempt.error).toContain("no response within 1s")
    }
  })

  it("a refused connection is retried, then exhausted", async () => {
    const port = await freePort()
    const { delivery } = await deliverTo(`https://127.0.0.1:${port}/hook`)
    expect(delivery.state).toBe("exhausted")
    expect(delivery.attempts.map((a) => a.outcome)).toEqual(["retry", "retry", "exhausted"])
    for (const attempt of delivery.attempts) expect(attempt.error).toContain("ECONNREFUSED")
  })

  it("a server error followed by success ends delivered, with the same delivery id on both attempts", async () => {
    replies.set("/flaky", (_request, index) => ({ status: forPath("/flaky").length === 1 ? 502 : 200, body: String(index) }))
    const { delivery } = await deliverTo(receiver.url("/flaky"))
    expect(delivery.state).toBe("delivered")
    expect(delivery.attempts.map((a) => a.statusCode)).toEqual([502, 200])
    expect(new Set(forPath("/flaky").map((r) => header(r, "x-service-delivery-id")))).toEqual(new Set([delivery.id]))
  })

  it("every attempt is signed with the secret current when it is sent: a regenerated secret applies to the retry", async () => {
    let ids!: Awaited<ReturnType<typeof t.createEnvironment>>
    let regenerated: string | undefined
    replies.set("/rotate", async () => {
      if (regenerated === undefined) {
        // Between the first and the second attempt, the customer regenerates the secret.
        regenerated = await t.run(Effect.flatMap(Environments, (envs) => envs.regenerateWebhookSecret(ids.agentId, ids.environmentId)))
        return { status: 500 }
      }
      return { status: 200 }
    })
    ids = await t.createEnvironment(receiver.url("/rotate"))
    await t.enqueue(t.sessionEnded(ids))
    const [delivery] = await t.settled(ids)
    expect(delivery!.state).toBe("delivered")
    const [first, second] = forPath("/rotate")
    expect(regenerated).toBeDefined()
    expect(regenerated).not.toBe(ids.secret)
    expect(verifies(first!, ids.secret!)).toBe(true)
    expect(verifies(first!, regenerated!)).toBe(false)
    expect(verifies(second!, regenerated!)).toBe(true)
    expect(verifies(second!, ids.secret!)).toBe(false)
    // Each attempt carries its own send-time timestamp.
    expect(Math.abs(Number(header(second!, "x-service-timestamp")) - Date.now() / 1000)).toBeLessThan(30)
  })

  /** Verified as a receiver would, with the `standardwebhooks` package and the secret as shown. */
  const standardVerifies = (request: ReceivedRequest, secret: string) => {
    try {
      new Webhook(secret).verify(request.body.toString("utf8"), {
        "webhook-id": header(request, "webhook-id") ?? "",
        "webhook-timestamp": header(request, "webhook-timestamp") ?? "",
        "webhook-signature": header(request, "webhook-signature") ?? ""
      })
      return true
    } catch {
      return false
    }
  }

  it.each([
    ["service", { service: true, standard: false }],
    ["standard", { service: false, standard: true }],
    ["both", { service: true, standard: true }]
  ] as const)("webhookSignatureScheme %s: the scheme's headers, verified by its receivers, on every attempt", async (scheme, signedWith) => {
    const path = `/scheme-${scheme}`
    replies.set(path, () => ({ status: forPath(path).length === 1 ? 503 : 200 }))
    const ids = await t.createEnvironment(receiver.url(path), { webhookSignatureScheme: scheme })
    await t.enqueue(t.sessionEnded(ids))
    const [delivery] = await t.settled(ids)
    expect(delivery!.state).toBe("delivered")
    const requests = forPath(path)
    expect(requests).toHaveLength(2)
    for (const request of requests) {
      expect(verifies(request, ids.secret!)).toBe(signedWith.service)
      expect(request.headers["x-service-signature"] !== undefined).toBe(signedWith.service)
      expect(standardVerifies(request, ids.secret!)).toBe(signedWith.standard)
      expect(request.headers["webhook-signature"] !== undefined).toBe(signedWith.standard)
      if (signedWith.standard) {
        // The id is the delivery's, the same on a retry (receivers deduplicate on it).
        expect(header(request, "webhook-id")).toBe(delivery!.id)
        expect(header(request, "webhook-signature")).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/)
      }
    }
    // Another secret does not verify.
    expect(standardVerifies(requests[0]!, `whsec_${Buffer.alloc(32, 7).toString("base64")}`)).toBe(false)
  })

  it("sends unsigned (no signature headers) when the environment's secret was cleared, and says so in the headers it sends", async () => {
    const ids = await t.createEnvironment(receiver.url("/unsigned"))
    await t.run(Effect.flatMap(Environments, (envs) => envs.update(ids.agentId, ids.environmentId, { webhookSecret: null })))
    await t.enqueue(t.sessionEnded(ids))
    await t.settled(ids)
    const [request] = forPath("/unsigned")
    expect(request!.headers["x-service-signature"]).toBeUndefined()
    expect(request!.headers["x-service-timestamp"]).toBeUndefined()
    expect(header(request!, "x-service-attempt")).toBe("1")
    expect(header(request!, "content-type")).toBe("application/json")
  })

  it("queues nothing for an environment without a webhook, or one that does not exist", async () => {
    const ids = await t.createEnvironment(null)
    await t.enqueue(t.sessionEnded(ids))
    await t.enqueue(t.sessionEnded({ agentId: ids.agentId, environmentId: "env_missing" }))
    expect(await t.list(ids)).toEqual([])
  })

  it("an environment whose webhook disappeared without notice is cancelled at send time", async () => {
    let ids!: Awaited<ReturnType<typeof t.createEnvironment>>
    replies.set("/vanish", async () => {
      // Another instance removed the URL: this process hears nothing, the next attempt finds out.
      await t.run(
        Effect.flatMap(EnvironmentStore, (store) =>
          store.update(ids.agentId, ids.environmentId, (env) => Either.right({ ...env, webhookUrl: null, webhookSecretSealed: null }))
        )
      )
      return { status: 500 }
    })
    ids = await t.createEnvironment(receiver.url("/vanish"))
    await t.enqueue(t.sessionEnded(ids))
    const [delivery] = await t.settled(ids)
    expect(delivery!.state).toBe("cancelled")
    expect(delivery!.reason).toBe("webhook removed")
    expect(delivery!.attempts).toHaveLength(1)
  })

  it("records its work on the metrics registry", async () => {
    const text = await t.run(Effect.flatMap(Metrics, ({ registry }) => Effect.promise(() => registry.metrics())))
    expect(text).toMatch(/callgate_webhook_deliveries_total\{outcome="delivered"\} [1-9]/)
    expect(text).toMatch(/callgate_webhook_deliveries_total\{outcome="failed"\} [1-9]/)
    expect(text).toMatch(/callgate_webhook_deliveries_total\{outcome="exhausted"\} [1-9]/)
    expect(text).toMatch(/callgate_webhook_attempt_duration_seconds_count\{result="success"\} [1-9]/)
    expect(text).toMatch(/callgate_webhook_attempt_duration_seconds_count\{result="connection_error"\} [1-9]/)
    expect(text).toMatch(/callgate_webhook_outbox_depth \d+/)
    expect(text).toMatch(/callgate_webhook_outbox_oldest_pending_age_seconds \d+/)
    const timed = await timing.run(Effect.flatMap(Metrics, ({ registry }) => Effect.promise(() => registry.metrics())))
    expect(timed).toMatch(/callgate_webhook_attempt_duration_seconds_count\{result="timeout"\} [1-9]/)
  })
})

describe.each<StoreKind>(["memory", "redis"])("removing a webhook cancels its pending deliveries (%s outbox)", (kind) => {
  let t: ReturnType<typeof makeWebhookRuntime>
  let receiver: Receiver
  let hold: Array<() => void> = []

  beforeAll(async () => {
    // Retries an hour apart keep failed deliveries pending for the length of a test.
    t = makeWebhookRuntime(kind, { WEBHOOK_RETRY_SCHEDULE: "1h", WEBHOOK_TIMEOUT: "2s" })
    receiver = await startReceiver((request) => {
      if (request.path === "/hold") return new Promise<Reply>((resolve) => hold.push(() => resolve({ status: 503 })))
      return { status: 500 }
    })
  })
  afterAll(async () => {
    for (const release of hold) release()
    await t.close()
    await receiver.close()
  })

  const pendingRetry = async () => {
    const ids = await t.createEnvironment(receiver.url("/fail"))
    await t.enqueue(t.sessionEnded(ids))
    await eventually(async () => ((await t.list(ids))[0]?.attempts.length === 1 ? true : undefined))
    const [delivery] = await t.list(ids)
    expect(delivery!.state).toBe("pending")
    expect(Date.parse(delivery!.nextAttemptAt!) - Date.now()).toBeGreaterThan(40 * 60_000)
    return ids
  }

  it("setting webhookUrl to null cancels with the reason 'webhook removed'", async () => {
    const ids = await pendingRetry()
    await t.run(Effect.flatMap(Environments, (envs) => envs.update(ids.agentId, ids.environmentId, { webhookUrl: null, webhookSecret: null })))
    const [delivery] = await t.settled(ids)
    expect([delivery!.state, delivery!.reason, delivery!.nextAttemptAt]).toEqual(["cancelled", "webhook removed", null])
  })

  it("deleting the environment cancels with the reason 'environment deleted'", async () => {
    const ids = await pendingRetry()
    await t.run(Effect.flatMap(Environments, (envs) => envs.remove(ids.agentId, ids.environmentId)))
    // The environment is gone from /v1, so read the outbox directly.
    const { OutboxStore } = await import("../../src/webhooks/OutboxStore.js")
    const delivery = await eventually(async () => {
      const page = await t.run(Effect.flatMap(OutboxStore, (store) => store.list(ids.agentId, ids.environmentId, { limit: 1 })))
      const found = page.deliveries[0]
      return found?.state === "cancelled" ? found : undefined
    })
    expect(delivery.reason).toBe("environment deleted")
  })

  it("an attempt in flight when the webhook is removed is not retried afterwards", async () => {
    const ids = await t.createEnvironment(receiver.url("/hold"))
    await t.enqueue(t.sessionEnded(ids))
    await eventually(() => (hold.length > 0 ? true : undefined))
    await t.run(Effect.flatMap(Environments, (envs) => envs.update(ids.agentId, ids.environmentId, { webhookUrl: null })))
    for (const release of hold.splice(0)) release()
    const [delivery] = await t.settled(ids)
    expect(delivery!.state).toBe("cancelled")
    expect(delivery!.reason).toBe("webhook removed")
    expect(delivery!.attempts.map((a) => a.statusCode)).toEqual([503])
  })

  it("leaves other environments' deliveries alone", async () => {
    const kept = await pendingRetry()
    const removed = await pendingRetry()
    await t.run(Effect.flatMap(Environments, (envs) => envs.update(removed.agentId, removed.environmentId, { webhookUrl: null })))
    await t.settled(removed)
    const [delivery] = await t.list(kept)
    expect(delivery!.state).toBe("pending")
    expect(Option.isSome(Option.fromNullable(delivery!.nextAttemptAt))).toBe(true)
  })
})

describe("concurrency bounds", () => {
  let t: ReturnType<typeof makeWebhookRuntime>
  let a: Receiver
  let b: Receiver
  /** Requests being answered now, over both receivers, and the most ever. */
  let active = 0
  let maxActive = 0
  /** While closed, every request waits here until the test releases it. */
  let gateOpen = false
  const held: Array<{ readonly host: "a" | "b"; readonly release: () => void }> = []
  const release = (host: "a" | "b") => {
    const index = held.findIndex((h) => h.host === host)
    expect(index).toBeGreaterThanOrEqual(0)
    held.splice(index, 1)[0]!.release()
  }
  const openGate = () => {
    gateOpen = true
    for (const h of held.splice(0)) h.release()
  }

  beforeAll(async () => {
    t = makeWebhookRuntime("redis", { WEBHOOK_CONCURRENCY: "4", WEBHOOK_CONCURRENCY_PER_HOST: "3", WEBHOOK_TIMEOUT: "5s" })
    const gated = (host: "a" | "b") => async (): Promise<Reply> => {
      active++
      maxActive = Math.max(maxActive, active)
      // Held while the gate is closed; once open, answers overlap for a while, so a broken limit shows.
      if (!gateOpen) await new Promise<void>((resolve) => held.push({ host, release: resolve }))
      else await new Promise((resolve) => setTimeout(resolve, 50))
      active--
      return { status: 200 }
    }
    a = await startReceiver(gated("a"))
    b = await startReceiver(gated("b"))
  })
  afterAll(async () => {
    openGate()
    await t.close()
    await a.close()
    await b.close()
  })

  it("holds WEBHOOK_CONCURRENCY overall and WEBHOOK_CONCURRENCY_PER_HOST per destination host", async () => {
    const envA = await t.createEnvironment(a.url())
    const envB = await t.createEnvironment(b.url())
    const enqueue = (env: typeof envA, n: number) => Promise.all(Array.from({ length: n }, () => t.enqueue(t.sessionEnded(env))))

    // One host: its limit (3) is reached and held; the fourth waits for a free slot of its host.
    await enqueue(envA, 4)
    await eventually(() => (a.inFlight() === 3 ? true : undefined))
    expect(a.requests).toHaveLength(3)
    release("a")
    await a.waitFor(4)
    await eventually(() => (a.inFlight() === 3 ? true : undefined))
    expect(a.maxInFlight()).toBe(3)
    for (let i = 0; i < 3; i++) release("a")
    expect((await t.settled(envA, 4)).map((d) => d.state)).toEqual(["delivered", "delivered", "delivered", "delivered"])

    // Two hosts: the overall limit (4) is reached and held with two on each.
    await enqueue(envA, 2)
    await a.waitFor(6)
    await enqueue(envB, 2)
    await b.waitFor(2)
    await eventually(() => (active === 4 ? true : undefined))
    // More for both hosts while all four hang: none starts until one is answered; then exactly one does.
    await enqueue(envA, 4)
    await enqueue(envB, 8)
    release("b")
    await eventually(() => (a.requests.length + b.requests.length === 9 ? true : undefined))
    await eventually(() => (active === 4 ? true : undefined))

    // Then everything, answered with overlap: neither limit is ever exceeded.
    openGate()
    const [deliveredA, deliveredB] = await Promise.all([t.settled(envA, 10, 20_000), t.settled(envB, 10, 20_000)])
    expect([...deliveredA, ...deliveredB].every((d) => d.state === "delivered")).toBe(true)
    expect(a.requests).toHaveLength(10)
    expect(b.requests).toHaveLength(10)
    expect(a.maxInFlight()).toBe(3)
    expect(b.maxInFlight()).toBeLessThanOrEqual(3)
    expect(maxActive).toBe(4)
  })
})
