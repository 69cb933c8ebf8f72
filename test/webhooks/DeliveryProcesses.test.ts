import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest"
import { OutboxStore } from "../../src/webhooks/OutboxStore.js"
import { ADMIN_KEY, TEST_SECRETS_KEY, uniqueId } from "../support/testApp.js"
import { CA_FILE, eventually, type ReceivedRequest, type Receiver, type Reply, startReceiver } from "./httpsReceiver.js"
import { makeWebhookRuntime } from "./webhookRuntime.js"

const fixture = fileURLToPath(new URL("./fixtures/deliveryProcess.ts", import.meta.url))
const root = fileURLToPath(new URL("../..", import.meta.url))

interface DeliveryProcess {
  readonly child: ChildProcess
  readonly output: () => string
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

const running = new Set<ChildProcess>()

/** A separate callgate delivery process on the shared Redis, working the given outbox queue. */
const startProcess = async (queue: string, env: Record<string, string> = {}): Promise<DeliveryProcess> => {
  const child = spawn(process.execPath, ["--import", "tsx", fixture], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      REDIS_URL: inject("redisUrl"),
      SECRETS_KEY: TEST_SECRETS_KEY,
      ADMIN_API_KEY: ADMIN_KEY,
      REDIS_KEY_PREFIX: queue,
      LOG_LEVEL: "none",
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
      WEBHOOK_CA_FILE: CA_FILE,
      WEBHOOK_TIMEOUT: "2s",
      WEBHOOK_RETRY_SCHEDULE: "200ms,200ms,200ms",
      LEASE_MARGIN: "500 millis",
      ...env
    },
    stdio: ["ignore", "pipe", "pipe"]
  })
  running.add(child)
  let output = ""
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()))
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => {
      running.delete(child)
      resolve({ code, signal })
    })
  )
  // As the gateway's own start (test/support/gatewayProcess.ts): a busy machine may take long to load the modules.
  await eventually(() => (output.includes("ready") ? true : child.exitCode !== null ? Promise.reject(new Error(output)) : undefined), 120_000)
  return { child, output: () => output, exited }
}

const deliveryId = (request: ReceivedRequest) => request.headers["x-service-delivery-id"] as string

describe("delivery processes on one Redis", () => {
  let receiver: Receiver
  let hanging = true
  const inFlightById = new Map<string, number>()
  let overlaps = 0

  beforeAll(async () => {
    receiver = await startReceiver(async (request): Promise<Reply> => {
      const id = deliveryId(request)
      const now = (inFlightById.get(id) ?? 0) + 1
      inFlightById.set(id, now)
      if (now > 1) overlaps++
      try {
        if (hanging) return await new Promise<Reply>(() => {})
        await new Promise((resolve) => setTimeout(resolve, 20))
        return { status: 200 }
      } finally {
        inFlightById.set(id, (inFlightById.get(id) ?? 1) - 1)
      }
    })
  })
  afterEach(() => {
    for (const child of running) child.kill("SIGKILL")
  })
  afterAll(() => receiver.close())

  it(
    "a process SIGKILLed with attempts in flight loses nothing: a fresh process delivers every event once the leases expire",
    async () => {
      const queue = `${uniqueId("outbox")}:`
      const t = makeWebhookRuntime("redis", {}, false, queue)
      try {
        const ids = await t.createEnvironment(receiver.url("/crash"))
        const events = Array.from({ length: 5 }, () => t.sessionEnded(ids))
        for (const event of events) await t.enqueue(event)

        hanging = true
        const first = await startProcess(queue)
        // Every attempt reaches the receiver, which never answers: all five are in flight.
        await receiver.waitFor(5, 20_000)
        first.child.kill("SIGKILL")
        expect((await first.exited).signal).toBe("SIGKILL")

        // Nothing was settled, and nothing was lost: all five are still pending (leased by the dead process).
        const stuck = await t.list(ids)
        expect(stuck.map((d) => d.state)).toEqual(["pending", "pending", "pending", "pending", "pending"])
        expect((await t.run(Effect.flatMap(OutboxStore, (s) => s.stats))).depth).toBe(5)

        hanging = false
        const second = await startProcess(queue)
        const delivered = await t.settled(ids, 5, 30_000)
        expect(delivered.map((d) => d.state)).toEqual(["delivered", "delivered", "delivered", "delivered", "delivered"])
        expect(delivered.map((d) => d.payload).sort((a: any, b: any) => a.sessionId.localeCompare(b.sessionId))).toEqual(
          [...events].sort((a, b) => a.sessionId.localeCompare(b.sessionId))
        )
        // The crashed attempt left no record; the one that succeeded is the only attempt recorded.
        for (const d of delivered) expect(d.attempts.map((a) => [a.statusCode, a.outcome])).toEqual([[200, "delivered"]])
        // Each event reached the receiver twice: the attempt cut short, and the delivery.
        const byId = new Map<string, number>()
        for (const r of receiver.requests.filter((r) => r.path === "/crash")) byId.set(deliveryId(r), (byId.get(deliveryId(r)) ?? 0) + 1)
        expect([...byId.values()]).toEqual([2, 2, 2, 2, 2])
        expect(new Set(byId.keys())).toEqual(new Set(delivered.map((d) => d.id)))
        // Nothing is left leased or due.
        const stats = await t.run(Effect.flatMap(OutboxStore, (s) => s.stats))
        expect(stats.depth).toBe(0)

        second.child.kill("SIGTERM")
        expect((await second.exited).code).toBe(0)
        expect(second.output()).toContain('"delivered":5')
      } finally {
        await t.close()
      }
    },
    240_000
  )

  it(
    "two processes working one queue never send the same delivery at the same time, and deliver each once",
    async () => {
      hanging = false
      overlaps = 0
      const queue = `${uniqueId("outbox")}:`
      const t = makeWebhookRuntime("redis", {}, false, queue)
      try {
        // A generous timeout: this test is about sharing the queue, not about retries.
        const settings = { WEBHOOK_TIMEOUT: "10s", LEASE_MARGIN: "2 seconds" }
        const [a, b] = await Promise.all([startProcess(queue, settings), startProcess(queue, settings)])
        const ids = await t.createEnvironment(receiver.url("/shared"))
        const total = 150
        for (let i = 0; i < total; i++) await t.enqueue(t.sessionEnded(ids))
        const delivered = await t.settled(ids, total, 40_000)
        const odd = delivered.filter((d) => !(d.state === "delivered" && d.attempts.length === 1))
        expect(odd, JSON.stringify(odd.map((d) => [d.state, d.attempts]))).toEqual([])
        const requests = receiver.requests.filter((r) => r.path === "/shared")
        expect(requests).toHaveLength(total)
        expect(new Set(requests.map(deliveryId)).size).toBe(total)
        expect(overlaps).toBe(0)

        a.child.kill("SIGTERM")
        b.child.kill("SIGTERM")
        await Promise.all([a.exited, b.exited])
        const counts = [a, b].map((p) => Number(/"delivered":(\d+)/.exec(p.output())?.[1] ?? 0))
        expect(counts[0]! + counts[1]!, [a, b].map((p) => p.output()).join(" | ")).toBe(total)
        // Both took part: the queue is shared, not owned by the first process to poll it.
        expect(counts[0]).toBeGreaterThan(0)
        expect(counts[1]).toBeGreaterThan(0)
      } finally {
        await t.close()
      }
    },
    240_000
  )
})
