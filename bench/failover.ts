/**
 * Agent failover (docs/reliability.md, "Agent failover"): how long a caller is without an agent
 * when the one holding the call drops, on the same instance and across instances.
 *
 * Same instance: callgate runs as its own process; simulated Twilio calls (silence at the real
 * cadence) and one dial-in agent pool run here, the pool holding a socket for every call and every
 * failover and reopening each one after its call, as workers do. Of `calls` live calls, `failovers`
 * have their agent socket dropped (TCP closed without a close frame) at a random moment 1.5-4 s
 * into the call.
 *
 * Across instances: two callgate processes (A and B) on one private redis-server, as a fleet runs
 * (shared store, prefix and SECRETS_KEY). Every call is placed on A, whose agent pool holds exactly
 * one socket per call and reopens none during the run; B's pool holds the idle agents. Once all
 * `calls` are live on A, `failovers` of A's agent sockets are dropped at random moments over 2.5 s:
 * A has no idle agent left, so it asks the carrier to move each call's stream to B. The carrier
 * here is a Twilio-compatible server on loopback that honours the call update as Twilio does: it
 * stops the old stream and opens the `<Connect><Stream>` of the new TwiML (B's URL, its token) at
 * once.
 *
 * The gap runs from the drop to the new agent's receipt of `start` (customParameters.resumed),
 * both on this process's monotonic clock; callgate's own histogram
 * `callgate_agent_failover_gap_seconds` (B's, across instances) is read as a cross-check (bucket
 * bounds).
 *
 *   npx tsx bench/failover.ts [--calls 100] [--failovers 50] [--mode same|across|both]
 */
import { randomBytes } from "node:crypto"
import { createServer } from "node:http"
import { agentConnectUrl, DialInPool } from "../examples/agents/agent-host.js"
import { nowUs } from "../sim/FrameStamp.js"
import type { SimCall } from "../sim/SimCall.js"
import { parseStreamMarkup } from "../sim/StreamMarkup.js"
import { connectTwilioStream, placeTwilioCall } from "../sim/TwilioCall.js"
import { sleep, startRedis, whenRunDirectly } from "./benchProcess.js"
import { callerNumber } from "./carrierSim.js"
import { adminApi, createBenchEnvironment, type RunningGateway, startGateway } from "./systemUnderTest.js"

export interface FailoverBenchOptions {
  /** Live calls. Default 100. */
  readonly calls?: number
  /** Of them, calls whose agent socket is dropped. Default 50. */
  readonly failovers?: number
  /** New calls per second. Default 25. */
  readonly perSecond?: number
  /** Compiled tree to run callgate from (build.ts); default: the sources through tsx. */
  readonly build?: string
  /** Which failovers to measure. Default both. */
  readonly mode?: "same" | "across" | "both"
}

/** The same-instance and the cross-instance figures; a mode that failed carries its error. */
export interface FailoverBenchFigures {
  readonly sameInstance?: FailoverModeFigures | { readonly error: string }
  readonly acrossInstances?: FailoverAcrossFigures | { readonly error: string }
}

export interface FailoverAcrossFigures extends FailoverModeFigures {
  /** Call updates the carrier was asked for (one per move expected). */
  readonly moves: number
}

export interface FailoverModeFigures {
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
/** The call's index, out of the caller's number the agent's `start` names (callerNumber). */
const indexOfStart = (start: { readonly customParameters: Readonly<Record<string, string>> }) => Number(start.customParameters.from?.slice(5))
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
/**
 * Places `callCount` Twilio calls on `gatewayUrl` at `perSecond`, each handed to `placed` with its
 * index as it is answered; resolves once every placement has settled.
 */
const placeCallsAtRate = async (
  gatewayUrl: string,
  agentId: string,
  environmentId: string,
  callCount: number,
  perSecond: number,
  placed: (index: number, call: Awaited<ReturnType<typeof placeTwilioCall>>) => void
): Promise<void> => {
  const startedAt = performance.now()
  const placing: Array<Promise<unknown>> = []
  for (let i = 1; i <= callCount; i++) {
    const due = startedAt + ((i - 1) * 1000) / perSecond
    if (due > performance.now()) await sleep(due - performance.now())
    placing.push(
      placeTwilioCall({ gatewayUrl, agentId, environmentId, authToken: AUTH_TOKEN, accountSid: ACCOUNT_SID, callSid: callSidOf(i), from: callerNumber(i) }).then(
        (call) => placed(i, call)
      )
    )
  }
  await Promise.allSettled(placing)
}

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

const runSameInstance = async (options: FailoverBenchOptions): Promise<FailoverModeFigures> => {
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

    await placeCallsAtRate(gateway.baseUrl, agentId, env.environmentId, callCount, perSecond, (_, call) => void calls.push(call))
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

/**
 * A Twilio-compatible REST server that honours a call update as Twilio does: the call's stream
 * (a SimCall this bench placed, registered with `track`) stops and the `<Connect><Stream>` of the
 * update's TwiML opens at once, with its `<Parameter>`s; the update is answered 200. Any other
 * request (a fallback's) is counted apart.
 */
const startMovingTwilio = async () => {
  const streams = new Map<string, SimCall>()
  const moving: Array<Promise<void>> = []
  let moves = 0
  let others = 0
  const failures: Array<string> = []
  const server = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const callSid = /\/Calls\/(CA[0-9a-f]{32})\.json$/.exec(req.url ?? "")?.[1]
      const twiml = new URLSearchParams(Buffer.concat(chunks).toString("utf8")).get("Twiml")
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ sid: callSid ?? "CA0", account_sid: ACCOUNT_SID, status: "in-progress" }))
      const old = callSid === undefined ? undefined : streams.get(callSid)
      if (callSid === undefined || twiml === null || old === undefined || !twiml.includes("<Stream")) {
        others++
        if (process.env.BENCH_DEBUG !== undefined) process.stderr.write(`${req.method} ${req.url}\n`)
        return
      }
      moves++
      const move = async () => {
        const stream = parseStreamMarkup(twiml)
        await old.hangup("the call's TwiML was updated").catch(() => undefined)
        const next = await connectTwilioStream({ url: stream.url, callSid, accountSid: ACCOUNT_SID, customParameters: stream.parameters, authToken: AUTH_TOKEN })
        streams.set(callSid, next)
      }
      moving.push(move().catch((error: Error) => void failures.push(`${callSid}: ${error.message}`)))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    track: (callSid: string, call: SimCall) => void streams.set(callSid, call),
    streams: () => [...streams.values()],
    moves: () => moves,
    others: () => others,
    failures: () => failures,
    close: async () => {
      await Promise.allSettled(moving)
      await new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
    }
  }
}

/** The idle dial-in agents of `agentId` each instance holds, as `viewer`'s registry lists them. */
const idleByInstance = async (viewer: RunningGateway, agentId: string) => {
  const listed = await adminApi<{ instances: ReadonlyArray<{ id: string; idleAgents: ReadonlyArray<{ agentId: string; idle: number }> }> }>(viewer, "GET", "/v1/instances")
  return Object.fromEntries(listed.instances.map((entry) => [entry.id, entry.idleAgents.filter((e) => e.agentId === agentId).reduce((sum, e) => sum + e.idle, 0)]))
}

const runAcrossInstances = async (options: FailoverBenchOptions): Promise<FailoverAcrossFigures> => {
  const callCount = options.calls ?? 100
  const failovers = Math.min(options.failovers ?? 50, callCount)
  const perSecond = options.perSecond ?? 25
  const redis = await startRedis()
  const twilio = await startMovingTwilio()
  const gateways: Array<RunningGateway> = []
  const pools: Array<DialInPool> = []
  try {
    // What the instances of a fleet share (docs/scaling.md): the store and its prefix, SECRETS_KEY, the admin key.
    const adminKey = `bench-admin-${randomBytes(12).toString("hex")}`
    const shared = {
      REDIS_URL: redis.url,
      REDIS_KEY_PREFIX: `bench-failover-${randomBytes(4).toString("hex")}:`,
      SECRETS_KEY: randomBytes(32).toString("hex"),
      TWILIO_ACCOUNT_SID: ACCOUNT_SID,
      TWILIO_AUTH_TOKEN: AUTH_TOKEN,
      TWILIO_API_BASE_URL: twilio.url,
      LOG_LEVEL: process.env.BENCH_DEBUG !== undefined ? "info" : "warn"
    }
    const started = await Promise.allSettled(
      ["failover-a", "failover-b"].map((id) => startGateway({ build: options.build, adminKey, env: { ...shared, INSTANCE_ID: id } }))
    )
    for (const one of started) if (one.status === "fulfilled") gateways.push(one.value)
    const failed = started.find((one): one is PromiseRejectedResult => one.status === "rejected")
    if (failed !== undefined) throw failed.reason as Error
    const [a, b] = gateways as [RunningGateway, RunningGateway]
    const agentId = "bench_failover_across"
    const env = await createBenchEnvironment(a, agentId, { agentFailoverTimeout: 10 })
    const droppedAt = new Map<number, number>()
    const resumedAt = new Map<number, number>()
    const onA = new Map<number, { readonly socket: { terminate: () => void } }>()
    // A: one socket per call, none reopened during the run (A has no idle agent once every call is live).
    const poolA = new DialInPool({ url: agentConnectUrl(a.baseUrl, agentId, env.environmentId), apiKey: env.apiKey, capacity: callCount, reconnectDelayMs: 30_000 })
    // B: an idle agent for every failover, and a few spare.
    const capacityB = failovers + 10
    const poolB = new DialInPool({ url: agentConnectUrl(b.baseUrl, agentId, env.environmentId), apiKey: env.apiKey, capacity: capacityB })
    pools.push(poolA, poolB)
    poolA.on("call", (call) => call.once("start", (start) => void onA.set(indexOfStart(start), call)))
    let placedOnB = 0
    poolB.on("call", (call) =>
      call.once("start", (start) => {
        if (start.customParameters.resumed === "true") resumedAt.set(indexOfStart(start), nowUs())
        else placedOnB++
      })
    )
    poolA.start()
    poolB.start()
    await Promise.all([poolA.waitForIdle(callCount, 30_000), poolB.waitForIdle(capacityB, 30_000)])
    // A places calls and moves streams by what the store says of B: wait until it lists B's agents.
    for (const deadline = performance.now() + 30_000; ; await sleep(100)) {
      const idle = await idleByInstance(a, agentId)
      if (idle["failover-a"] === callCount && idle["failover-b"] === capacityB) break
      if (performance.now() > deadline) throw new Error(`the registry did not list every idle agent within 30 s: ${JSON.stringify(idle)}`)
    }

    await placeCallsAtRate(a.baseUrl, agentId, env.environmentId, callCount, perSecond, (i, call) => twilio.track(callSidOf(i), call))
    for (const deadline = performance.now() + 30_000; onA.size < callCount; await sleep(50)) {
      if (performance.now() > deadline) throw new Error(`only ${onA.size} of ${callCount} calls reached an agent on A (${placedOnB} were placed on B; ${twilio.streams().length} streams opened)`)
    }
    // Every call is live on A, with A's agents all taken: the drops, at random moments over 2.5 s.
    await Promise.all(
      Array.from({ length: failovers }, (_, i) => i + 1).map(
        (index) =>
          new Promise<void>((resolve) =>
            setTimeout(() => {
              droppedAt.set(index, nowUs())
              onA.get(index)!.socket.terminate()
              resolve()
            }, Math.random() * 2500)
          )
      )
    )
    const done = () => [...droppedAt.keys()].every((index) => resumedAt.has(index))
    const waitUntil = performance.now() + 20_000
    while (performance.now() < waitUntil && !done()) await sleep(50)

    const gaps = [...droppedAt].flatMap(([index, at]) => (resumedAt.has(index) ? [(resumedAt.get(index)! - at) / 1000] : [])).sort((x, y) => x - y)
    const metrics = await fetch(`${b.baseUrl}/metrics`).then((res) => res.text(), () => "")
    if (process.env.BENCH_DEBUG !== undefined) process.stderr.write(`A:\n${a.stdout()}\nB:\n${b.stdout()}\n`)
    if (twilio.failures().length > 0) process.stderr.write(`failover across instances: ${twilio.failures().length} stream moves failed, e.g. ${twilio.failures()[0]}\n`)
    return {
      calls: callCount,
      failovers: droppedAt.size,
      reattached: gaps.length,
      missing: droppedAt.size - gaps.length,
      p50: round(percentile(gaps, 50)),
      p99: round(percentile(gaps, 99)),
      max: round(gaps[gaps.length - 1] ?? NaN),
      moves: twilio.moves(),
      carrierRequests: twilio.others(),
      gatewayHistogram: histogramBounds(metrics, "callgate_agent_failover_gap_seconds")
    }
  } finally {
    await Promise.all(twilio.streams().map((call) => (call.isOpen ? call.hangup("bench over").catch(() => undefined) : undefined)))
    await Promise.all(pools.map((pool) => pool.close()))
    await Promise.all(gateways.map((gateway) => gateway.stop()))
    await twilio.close()
    redis.stop()
  }
}

/** One mode's figures, or its error: the other mode still runs. */
const measured = async <T>(run: () => Promise<T>): Promise<T | { readonly error: string }> => {
  try {
    return await run()
  } catch (error) {
    return { error: (error as Error).message }
  }
}

export const runFailoverBench = async (options: FailoverBenchOptions = {}): Promise<FailoverBenchFigures> => {
  const mode = options.mode ?? "both"
  return {
    ...(mode !== "across" ? { sameInstance: await measured(() => runSameInstance(options)) } : {}),
    ...(mode !== "same" ? { acrossInstances: await measured(() => runAcrossInstances(options)) } : {})
  }
}

/** `--mode same|across|both` (whenRunDirectly's arguments are numbers). */
const modeArg = (): FailoverBenchOptions["mode"] => {
  const i = process.argv.indexOf("--mode")
  const mode = i > 0 ? process.argv[i + 1] : undefined
  if (mode === undefined) return undefined
  if (mode !== "same" && mode !== "across" && mode !== "both") throw new Error(`--mode must be same, across or both, not ${mode}`)
  return mode
}

await whenRunDirectly(import.meta.url, (arg) => runFailoverBench({ calls: arg("calls"), failovers: arg("failovers"), mode: modeArg() }))
