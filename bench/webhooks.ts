/**
 * Event webhook delivery through the Redis outbox, end to end: the real Outbox.enqueue (environment
 * read, delivery stored in Redis), the real delivery worker (Lua claims, leases, send-time signing,
 * the SSRF-checked undici client) at its default concurrency, and a local HTTPS receiver in a worker
 * thread (a core of its own, as a real receiver would have).
 *
 * After a warm-up of up to 3000 deliveries (not measured):
 * - drain: `backlog` deliveries already stored; a worker starts: deliveries per second from its
 *   start to the last arrival;
 * - pipeline: `backlog` events enqueued by 32 concurrent producers in the worker's process while it
 *   delivers: deliveries per second from the first enqueue to the last arrival;
 * - latency: events enqueued at `rate` per second for `seconds`: the delay from calling
 *   Outbox.enqueue to the receiver getting the first attempt, p50/p90/p99/max in ms.
 *
 * Redis: REDIS_URL (or --redis), else a private redis-server started for the run.
 *
 *   npx tsx bench/webhooks.ts [--backlog 10000] [--rate 100] [--seconds 10] [--redis redis://...]
 *                             [--set WEBHOOK_CONCURRENCY_PER_HOST=32 ...]
 */
import { readFileSync } from "node:fs"
import { fileURLToPath, pathToFileURL } from "node:url"
import { Worker } from "node:worker_threads"
import { ConfigProvider, Effect, Layer, ManagedRuntime } from "effect"
import { Redis } from "ioredis"
import { AppConfig } from "../src/config/AppConfig.js"
import { Environments } from "../src/environments/Environments.js"
import { DeliveryWorkerLive } from "../src/webhooks/DeliveryWorker.js"
import { DomainLive, FoundationLive, LoggingLive } from "../src/layers.js"
import { Outbox } from "../src/webhooks/Outbox.js"
import type { SessionEndedEvent } from "../src/webhooks/SessionEndedEvent.js"
import { startRedis } from "./benchProcess.js"

export interface WebhookBenchOptions {
  readonly backlog?: number
  readonly rate?: number
  readonly seconds?: number
  readonly redisUrl?: string
  /** Extra callgate settings, e.g. WEBHOOK_CONCURRENCY_PER_HOST. */
  readonly settings?: Readonly<Record<string, string>>
}

export interface WebhookBenchFigures {
  readonly redis: string
  readonly concurrency: { readonly overall: number; readonly perHost: number }
  readonly drain: {
    readonly deliveries: number
    readonly seconds: number
    readonly deliveriesPerSecond: number
    /** Event-loop utilisation of the callgate thread while draining (1 = saturated). */
    readonly mainThreadBusy: number
    /** CPU (user + system, all threads of this process, the receiver's included) per delivery. */
    readonly cpuMsPerDelivery: number
  }
  readonly pipeline: { readonly deliveries: number; readonly seconds: number; readonly deliveriesPerSecond: number }
  readonly latency: {
    readonly ratePerSecond: number
    readonly events: number
    readonly enqueueToFirstAttemptMs: { readonly p50: number; readonly p90: number; readonly p99: number; readonly max: number }
  }
  readonly targets: { readonly deliveriesPerSecondAtLeast1000: boolean; readonly p99Below50ms: boolean }
}

const tls = (name: string) => readFileSync(fileURLToPath(new URL(`../test/fixtures/tls/${name}`, import.meta.url)))
const CA_FILE = fileURLToPath(new URL("../test/fixtures/tls/ca.pem", import.meta.url))

/**
 * The receiver's code, run in a worker thread so it has a core of its own, as a real receiver
 * would: answers 200 at once and reports, in batches, when each session's first attempt arrived
 * (wall-clock milliseconds with sub-millisecond precision, comparable across threads).
 */
const RECEIVER = `
const { parentPort, workerData } = require("node:worker_threads")
const { createServer } = require("node:https")
const seen = new Set()
let batch = []
let received = 0
const server = createServer({ key: workerData.key, cert: workerData.cert, keepAliveTimeout: 10000 }, (req, res) => {
  const chunks = []
  req.on("data", (chunk) => chunks.push(chunk))
  req.on("end", () => {
    const at = performance.timeOrigin + performance.now()
    const sessionId = JSON.parse(Buffer.concat(chunks).toString("utf8")).sessionId
    received++
    if (!seen.has(sessionId)) {
      seen.add(sessionId)
      batch.push(sessionId, at)
    }
    res.writeHead(200).end()
  })
})
setInterval(() => {
  if (batch.length > 0) parentPort.postMessage({ arrivals: batch, received })
  batch = []
}, 5).unref()
server.listen(0, "127.0.0.1", () => parentPort.postMessage({ port: server.address().port }))
parentPort.on("message", () => server.close())
`

const now = () => performance.timeOrigin + performance.now()

const startReceiver = async () => {
  const firstArrival = new Map<string, number>()
  let lastArrival = 0
  let waiter: { count: number; resolve: () => void } | undefined
  const worker = new Worker(RECEIVER, { eval: true, workerData: { key: tls("server-key.pem"), cert: tls("server.pem") } })
  const port = await new Promise<number>((resolve, reject) => {
    worker.once("error", reject)
    worker.on("message", (message: { port?: number; arrivals?: Array<string | number> }) => {
      if (message.port !== undefined) return resolve(message.port)
      const arrivals = message.arrivals ?? []
      for (let i = 0; i < arrivals.length; i += 2) {
        firstArrival.set(arrivals[i] as string, arrivals[i + 1] as number)
        lastArrival = Math.max(lastArrival, arrivals[i + 1] as number)
      }
      if (waiter !== undefined && firstArrival.size >= waiter.count) waiter.resolve()
    })
  })
  return {
    url: `https://127.0.0.1:${port}/hook`,
    firstArrival,
    lastArrival: () => lastArrival,
    /** Resolves once `count` distinct sessions have arrived. */
    waitFor: (count: number) =>
      new Promise<void>((resolve) => {
        if (firstArrival.size >= count) return resolve()
        waiter = { count, resolve }
      }),
    close: () => worker.terminate().then(() => undefined)
  }
}

/**
 * The production graph's webhook domain (src/layers.ts) over Redis under the bench's own
 * REDIS_KEY_PREFIX, logs off; with the delivery worker for the processes that deliver.
 */
const layerFor = (redisUrl: string, prefix: string, withWorker: boolean, settings: Record<string, string>) => {
  const domain = DomainLive.pipe(Layer.provideMerge(FoundationLive))
  const layer = withWorker ? DeliveryWorkerLive.pipe(Layer.provideMerge(domain)) : domain
  return layer.pipe(
    Layer.provide(LoggingLive),
    Layer.provide(
      Layer.setConfigProvider(
        ConfigProvider.fromMap(
          new Map([
            ["ADMIN_API_KEY", "bench-admin-key-0123456789"],
            ["LOG_LEVEL", "none"],
            ["REDIS_URL", redisUrl],
            ["REDIS_KEY_PREFIX", prefix],
            ["SECRETS_KEY", Buffer.alloc(32, 9).toString("base64")],
            ["WEBHOOK_ALLOW_PRIVATE_NETWORKS", "true"],
            ["WEBHOOK_CA_FILE", CA_FILE],
            ...Object.entries(settings)
          ])
        )
      )
    )
  )
}

const percentile = (sorted: ReadonlyArray<number>, p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN
const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits

export const runWebhookBench = async (options: WebhookBenchOptions = {}): Promise<WebhookBenchFigures> => {
  const backlog = options.backlog ?? 10_000
  const rate = options.rate ?? 100
  const seconds = options.seconds ?? 10
  const given = options.redisUrl ?? process.env.REDIS_URL
  const redis = given !== undefined ? { url: given, stop: () => {} } : await startRedis()
  const receiver = await startReceiver()
  // Every key of the run (the environment, the outbox) under one prefix, removed at the end.
  const prefix = `bench-${process.pid}-${Date.now().toString(36)}:`
  const producer = ManagedRuntime.make(layerFor(redis.url, prefix, false, options.settings ?? {}))
  let worker: ManagedRuntime.ManagedRuntime<unknown, unknown> | undefined
  try {
    const config = await producer.runPromise(AppConfig)
    const agentId = `bench_${process.pid}`
    const env = await producer.runPromise(
      Effect.flatMap(Environments, (envs) => envs.create(agentId, { name: "bench", webhookUrl: receiver.url }))
    )
    let n = 0
    const event = (): SessionEndedEvent => ({
      event: "session.ended",
      sessionId: `ses_${n++}`,
      agentId,
      environmentId: env.id,
      status: "completed",
      createdAt: new Date().toISOString(),
      agentPhoneNumber: "+14155550100",
      clientPhoneNumber: "+14155550199",
      duration: "42",
      direction: "inbound"
    })
    const enqueueWith = (runtime: ManagedRuntime.ManagedRuntime<any, unknown>, e: SessionEndedEvent) =>
      runtime.runPromise(Effect.flatMap(Outbox, (outbox) => outbox.enqueue(e)) as Effect.Effect<void, unknown, any>)
    const enqueueMany = async (runtime: ManagedRuntime.ManagedRuntime<any, unknown>, count: number, concurrency: number) => {
      let next = 0
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < count) {
            next++
            await enqueueWith(runtime, event())
          }
        })
      )
    }

    // Warm-up (not measured): the same code paths, JIT-compiled before the clock starts.
    // It drains the same outbox, and is gone before the measured backlog is stored.
    const warm = ManagedRuntime.make(layerFor(redis.url, prefix, true, options.settings ?? {}))
    await enqueueMany(warm, Math.min(3000, backlog), 32)
    await receiver.waitFor(Math.min(3000, backlog))
    await warm.dispose()
    const warmed = receiver.firstArrival.size

    // Drain: a backlog already stored, then a worker starts.
    await enqueueMany(producer, backlog, 32)
    worker = ManagedRuntime.make(layerFor(redis.url, prefix, true, options.settings ?? {})) as ManagedRuntime.ManagedRuntime<unknown, unknown>
    const elu0 = performance.eventLoopUtilization()
    const cpu0 = process.cpuUsage()
    await worker.runtime()
    const drainStart = now()
    await receiver.waitFor(warmed + backlog)
    const drainElu = performance.eventLoopUtilization(elu0).utilization
    const drainCpu = process.cpuUsage(cpu0)
    const drainSeconds = (receiver.lastArrival() - drainStart) / 1000

    // Warm, then the pipeline: enqueue and deliver at once.
    const pipelineStart = now()
    await enqueueMany(worker, backlog, 32)
    await receiver.waitFor(warmed + 2 * backlog)
    const pipelineSeconds = (receiver.lastArrival() - pipelineStart) / 1000

    // Latency at a steady rate, through the worker's own process (its enqueues wake it).
    const started = new Map<string, number>()
    const total = rate * seconds
    const interval = 1000 / rate
    const t0 = now()
    const pending: Array<Promise<void>> = []
    for (let i = 0; i < total; i++) {
      const due = t0 + i * interval
      const wait = due - now()
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
      const e = event()
      started.set(e.sessionId, now())
      pending.push(enqueueWith(worker, e))
    }
    await Promise.all(pending)
    await receiver.waitFor(warmed + 2 * backlog + total)
    const delays = [...started].map(([sessionId, at]) => receiver.firstArrival.get(sessionId)! - at).sort((a, b) => a - b)

    // Leave nothing behind in a shared Redis: every key under the bench's prefix.
    await worker.runPromise(Effect.flatMap(Environments, (envs) => envs.remove(agentId, env.id)))
    const client = new Redis(redis.url)
    for await (const keys of client.scanStream({ match: `${prefix}*`, count: 1000 })) {
      if ((keys as Array<string>).length > 0) await client.unlink(...(keys as Array<string>))
    }
    await client.quit()

    const drainRate = backlog / drainSeconds
    const pipelineRate = backlog / pipelineSeconds
    const p99 = percentile(delays, 99)
    return {
      redis: given !== undefined ? "REDIS_URL" : "private redis-server",
      concurrency: { overall: config.webhookConcurrency, perHost: config.webhookConcurrencyPerHost },
      drain: {
        deliveries: backlog,
        seconds: round(drainSeconds, 2),
        deliveriesPerSecond: Math.round(drainRate),
        mainThreadBusy: round(drainElu, 2),
        cpuMsPerDelivery: round((drainCpu.user + drainCpu.system) / 1000 / backlog, 2)
      },
      pipeline: { deliveries: backlog, seconds: round(pipelineSeconds, 2), deliveriesPerSecond: Math.round(pipelineRate) },
      latency: {
        ratePerSecond: rate,
        events: total,
        enqueueToFirstAttemptMs: {
          p50: round(percentile(delays, 50)),
          p90: round(percentile(delays, 90)),
          p99: round(p99),
          max: round(delays[delays.length - 1] ?? NaN)
        }
      },
      targets: { deliveriesPerSecondAtLeast1000: Math.min(drainRate, pipelineRate) >= 1000, p99Below50ms: p99 < 50 }
    }
  } finally {
    if (worker !== undefined) await worker.dispose()
    await producer.dispose()
    await receiver.close()
    redis.stop()
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(`--${name}`)
    return i > 0 ? process.argv[i + 1] : undefined
  }
  const figures = await runWebhookBench({
    ...(arg("backlog") ? { backlog: Number(arg("backlog")) } : {}),
    ...(arg("rate") ? { rate: Number(arg("rate")) } : {}),
    ...(arg("seconds") ? { seconds: Number(arg("seconds")) } : {}),
    ...(arg("redis") ? { redisUrl: arg("redis")! } : {}),
    settings: Object.fromEntries(
      process.argv.flatMap((a, i) => (a === "--set" && process.argv[i + 1]?.includes("=") ? [process.argv[i + 1]!.split("=", 2)] : []))
    )
  })
  process.stdout.write(JSON.stringify(figures, null, 2) + "\n")
  process.exit(0)
}
