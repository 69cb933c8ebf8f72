/**
 * Agent failover on one instance (docs/reliability.md, "Agent failover"): how long a caller is
 * without an agent when the one holding the call drops. callgate runs as its own process; simulated
 * Twilio calls (silence at the real cadence) and one dial-in agent pool run here, the pool holding
 * a socket for every call and every failover and reopening each one after its call, as workers do.
 *
 * Of `calls` live calls, `failovers` have their agent socket dropped (TCP closed without a close
 * frame) at a random moment 1.5-4 s into the call. The gap runs from the drop to the new agent's
 * receipt of `start` (customParameters.resumed), both on this process's monotonic clock; callgate's
 * own histogram `callgate_agent_failover_gap_seconds` is read as a cross-check (bucket bounds).
 *
 *   npx tsx bench/failover.ts [--calls 100] [--failovers 50]
 */
import { createServer } from "node:http"
import { agentConnectUrl, DialInPool } from "../examples/agents/agent-host.js"
import { nowUs } from "../sim/FrameStamp.js"
import type { SimCall } from "../sim/SimCall.js"
import { placeTwilioCall } from "../sim/TwilioCall.js"
import { sleep, whenRunDirectly } from "./benchProcess.js"
import { callerNumber } from "./carrierSim.js"
import { createBenchEnvironment, type RunningGateway, startGateway } from "./systemUnderTest.js"

export interface FailoverBenchOptions {
  /** Live calls. Default 100. */
  readonly calls?: number
  /** Of them, calls whose agent socket is dropped. Default 50. */
  readonly failovers?: number
  /** New calls per second. Default 25. */
  readonly perSecond?: number
  /** Compiled tree to run callgate from (build.ts); default: the sources through tsx. */
  readonly build?: string
}

export interface FailoverBenchFigures {
  readonly calls: number
  readonly failovers: number
  /** Dropped agents whose call a new agent took (`start` with resumed). */
  readonly reattached: number
  /** Dropped agents whose call no new agent took within the wait. */
  readonly missing: number
  /** From the drop to the new agent's `start`, ms. */
  readonly p50: number
  readonly p99: number
  readonly max: number
  /** Carrier REST requests during the run (a fallback would make one): 0 expected. */
  readonly carrierRequests: number
  /** callgate's own histogram: the bucket bound under which 50 % / 99 % fall, ms. */
  readonly gatewayHistogram: { readonly count: number; readonly p50AtMostMs: number; readonly p99AtMostMs: number } | null
}

const ACCOUNT_SID = "AC0000000000000000000000000000f0"
const AUTH_TOKEN = "bench-twilio-auth-token"
const callSidOf = (index: number) => `CA${index.toString(16).padStart(32, "0")}`
const percentile = (sorted: ReadonlyArray<number>, p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN
const round = (n: number) => Math.round(n * 100) / 100

/** A Twilio-compatible REST server that only counts requests (a failover makes none). */
const startCountingTwilio = async () => {
  let requests = 0
  const server = createServer((req, res) => {
    requests++
    if (process.env.BENCH_DEBUG !== undefined) process.stderr.write(`${req.method} ${req.url}\n`)
    req.resume()
    req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ sid: "CA0", account_sid: ACCOUNT_SID, status: "completed" })))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    requests: () => requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

/** The one unlabelled histogram's p50 / p99 bucket bounds out of /metrics text. */
const histogramBounds = (metrics: string, name: string) => {
  const buckets: Array<[number, number]> = []
  for (const match of metrics.matchAll(new RegExp(`^${name}_bucket\\{le="([^"]+)"\\} (\\S+)$`, "gm"))) {
    buckets.push([match[1] === "+Inf" ? Infinity : Number(match[1]), Number(match[2])])
  }
  buckets.sort((a, b) => a[0] - b[0])
  const count = buckets[buckets.length - 1]?.[1] ?? 0
  if (count === 0) return null
  const bound = (q: number) => (buckets.find(([, c]) => c >= q * count)?.[0] ?? Infinity) * 1000
  return { count, p50AtMostMs: bound(0.5), p99AtMostMs: bound(0.99) }
}

export const runFailoverBench = async (options: FailoverBenchOptions = {}): Promise<FailoverBenchFigures> => {
  const callCount = options.calls ?? 100
  const failovers = Math.min(options.failovers ?? 50, callCount)
  const perSecond = options.perSecond ?? 25
  const twilio = await startCountingTwilio()
  let gateway: RunningGateway | undefined
  let pool: DialInPool | undefined
  const calls: Array<SimCall> = []
  try {
    gateway = await startGateway({
      build: options.build,
      env: { TWILIO_ACCOUNT_SID: ACCOUNT_SID, TWILIO_AUTH_TOKEN: AUTH_TOKEN, TWILIO_API_BASE_URL: twilio.url, LOG_LEVEL: "warn" }
    })
    const agentId = "bench_failover"
    const env = await createBenchEnvironment(gateway, agentId, { agentFailoverTimeout: 10 })
    const droppedAt = new Map<number, number>()
    const resumedAt = new Map<number, number>()
    // A socket for every call and every failover, and a few spare (each one also reopens 100 ms after
    // its call, as workers do): what is measured is the failover, never a wait for capacity.
    const capacity = callCount + failovers + 10
    pool = new DialInPool({ url: agentConnectUrl(gateway.baseUrl, agentId, env.environmentId), apiKey: env.apiKey, capacity })
    pool.on("call", (call) =>
      call.once("start", (start) => {
        const index = Number(start.customParameters.from?.slice(5))
        if (start.customParameters.resumed === "true") return void resumedAt.set(index, nowUs())
        if (index > failovers) return
        setTimeout(() => {
          droppedAt.set(index, nowUs())
          call.socket.terminate()
        }, 1500 + Math.random() * 2500)
      })
    )
    pool.start()
    await pool.waitForIdle(capacity, 30_000)

    const startedAt = performance.now()
    const placing: Array<Promise<unknown>> = []
    for (let i = 1; i <= callCount; i++) {
      const due = startedAt + ((i - 1) * 1000) / perSecond
      if (due > performance.now()) await sleep(due - performance.now())
      placing.push(
        placeTwilioCall({
          gatewayUrl: gateway.baseUrl,
          agentId,
          environmentId: env.environmentId,
          authToken: AUTH_TOKEN,
          accountSid: ACCOUNT_SID,
          callSid: callSidOf(i),
          from: callerNumber(i)
        }).then((call) => void calls.push(call))
      )
    }
    await Promise.allSettled(placing)
    const done = () => droppedAt.size >= failovers && [...droppedAt.keys()].every((index) => resumedAt.has(index))
    const waitUntil = performance.now() + 15_000
    while (performance.now() < waitUntil && !done()) await sleep(50)

    const gaps = [...droppedAt].flatMap(([index, at]) => (resumedAt.has(index) ? [(resumedAt.get(index)! - at) / 1000] : [])).sort((a, b) => a - b)
    const metrics = await fetch(`${gateway.baseUrl}/metrics`).then((res) => res.text(), () => "")
    return {
      calls: callCount,
      failovers: droppedAt.size,
      reattached: gaps.length,
      missing: droppedAt.size - gaps.length,
      p50: round(percentile(gaps, 50)),
      p99: round(percentile(gaps, 99)),
      max: round(gaps[gaps.length - 1] ?? NaN),
      carrierRequests: twilio.requests(),
      gatewayHistogram: histogramBounds(metrics, "callgate_agent_failover_gap_seconds")
    }
  } finally {
    await Promise.all(calls.map((call) => (call.isOpen ? call.hangup("bench over").catch(() => undefined) : undefined)))
    await pool?.close()
    await gateway?.stop()
    await twilio.close()
  }
}

await whenRunDirectly(import.meta.url, (arg) => runFailoverBench({ calls: arg("calls"), failovers: arg("failovers") }))
