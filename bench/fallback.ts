/**
 * How long a caller waits between a hard error and callgate's carrier REST request that acts on
 * it (hang up, transfer, apply TwiML): callgate runs as its own process, pointed at a small
 * Twilio-compatible REST server on loopback; simulated Twilio calls and dial-in agents run here.
 *
 * - Agent drop: each call's agent socket is dropped (TCP closed without a close frame) at a random
 *   moment 1.5-4 s into the call. The delay runs from the drop to the REST request's arrival at
 *   the fake Twilio server, both on the shared monotonic clock. Half of the calls belong to an
 *   environment with the fallback disabled (the call is hung up), half to one with a phone
 *   fallback (the call is transferred, once the error fallback is wired in).
 * - Breaker trip: calls to an environment with errorFallbackTimeout 1 s and threshold 1, whose
 *   agent takes the call and never answers. The caller says one short utterance (generated speech
 *   without pauses long enough to end a turn); the delay runs from the breaker's deadline (the
 *   caller's last voiced frame sent + 1 s) to the REST request, so it includes how late the
 *   gateway's turn detector calls the turn over. A call the gateway ends before the caller has
 *   finished is counted apart.
 * - callgate's own histogram callgate_fallback_carrier_request_delay_seconds, when present in
 *   /metrics, as a cross-check (bucket bounds, not exact).
 *
 *   npx tsx bench/fallback.ts [--calls 100] [--breaker-calls 20]
 */
import { createServer, type IncomingMessage } from "node:http"
import { agentConnectUrl, DialInPool } from "../examples/agents/agent-host.js"
import { speechLike } from "../sim/AudioSource.js"
import { nowUs } from "../sim/FrameStamp.js"
import { FRAME_BYTES, FRAME_MS, isVoicedFrame } from "../sim/Mulaw.js"
import type { SimCall } from "../sim/SimCall.js"
import { placeTwilioCall } from "../sim/TwilioCall.js"
import { sleep, whenRunDirectly } from "./benchProcess.js"
import { callerNumber } from "./carrierSim.js"
import { createBenchEnvironment, type RunningGateway, startGateway } from "./systemUnderTest.js"

export interface FallbackBenchOptions {
  /** Calls whose agent socket is dropped (split over the two environments). Default 100. */
  readonly calls?: number
  /** Calls whose agent never answers (breaker trips). Default 20. */
  readonly breakerCalls?: number
  /** New calls per second. Default 25. */
  readonly perSecond?: number
  /** Compiled tree to run callgate from (build.ts); default: the sources through tsx. */
  readonly build?: string
}

export interface DelayFigures {
  readonly count: number
  /** Triggers that got no carrier request within the wait. */
  readonly missing: number
  readonly p50: number
  readonly p99: number
  readonly max: number
  /** What the carrier requests asked for: `Status=completed` (hangup), `Twiml` (transfer/TwiML), ... */
  readonly requests: Readonly<Record<string, number>>
  /** Calls that ended before their trigger could happen (breaker: before the caller finished). */
  readonly endedEarly: number
}

export interface FallbackBenchFigures {
  /**
   * The first hard error after start-up, measured apart (the carrier SDK loads lazily and the REST
   * connection is new), ms from the drop to the request.
   */
  readonly firstAfterStartMs: number
  readonly agentDrop: { readonly disabled: DelayFigures; readonly phone: DelayFigures }
  readonly breakerTrip: DelayFigures
  /** callgate's own trigger-to-request histogram by trigger: the bucket bound under which 50 % / 99 % fall, ms. */
  readonly gatewayHistogram: Readonly<Record<string, { readonly count: number; readonly p50AtMostMs: number; readonly p99AtMostMs: number }>>
}

export const ACCOUNT_SID = "AC0000000000000000000000000000b0"
export const AUTH_TOKEN = "bench-twilio-auth-token"
const CALL_PATH = /\/Calls\/(CA[0-9a-f]{32})\.json$/

export const callSidOf = (index: number) => `CA${index.toString(16).padStart(32, "0")}`

export interface CarrierRequest {
  readonly atUs: number
  readonly kind: string
}

/** A Twilio-compatible REST server that notes when each call's first update arrived and what it asked for. */
export const startFakeTwilio = async () => {
  const firstRequest = new Map<string, CarrierRequest>()
  const readBody = (req: IncomingMessage) =>
    new Promise<string>((resolve) => {
      let body = ""
      req.setEncoding("utf8").on("data", (chunk: string) => (body += chunk))
      req.on("end", () => resolve(body))
    })
  const server = createServer(async (req, res) => {
    const atUs = nowUs()
    const body = await readBody(req)
    const sid = CALL_PATH.exec(req.url ?? "")?.[1]
    if (req.method !== "POST" || sid === undefined) {
      res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ code: 20404, message: "not found", status: 404 }))
      return
    }
    const form = new URLSearchParams(body)
    const kind = form.has("Twiml") ? "Twiml" : form.has("Status") ? `Status=${form.get("Status")}` : form.has("Url") ? "Url" : "other"
    if (!firstRequest.has(sid)) firstRequest.set(sid, { atUs, kind })
    res.writeHead(200, { "content-type": "application/json" }).end(
      JSON.stringify({ sid, account_sid: ACCOUNT_SID, status: form.get("Status") ?? "in-progress", api_version: "2010-04-01" })
    )
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    firstRequest,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

export const percentile = (sorted: ReadonlyArray<number>, p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN
const round = (n: number) => Math.round(n * 100) / 100

const delayFigures = (triggers: ReadonlyMap<number, number>, requests: ReadonlyMap<string, CarrierRequest>, endedEarly = 0): DelayFigures => {
  const delays: Array<number> = []
  const kinds: Record<string, number> = {}
  let missing = 0
  for (const [index, triggerUs] of triggers) {
    const request = requests.get(callSidOf(index))
    if (request === undefined) {
      missing++
      continue
    }
    delays.push((request.atUs - triggerUs) / 1000)
    kinds[request.kind] = (kinds[request.kind] ?? 0) + 1
  }
  delays.sort((a, b) => a - b)
  return {
    count: delays.length,
    missing,
    p50: round(percentile(delays, 50)),
    p99: round(percentile(delays, 99)),
    max: round(delays[delays.length - 1] ?? NaN),
    requests: kinds,
    endedEarly
  }
}

/** Parses one Prometheus histogram out of /metrics text: per value of `label`, bucket bounds and counts. */
const histogramQuantiles = (metrics: string, name: string, label: string) => {
  const byLabel = new Map<string, Array<[number, number]>>()
  const pattern = new RegExp(`^${name}_bucket\\{(.*)\\} (\\S+)$`)
  for (const line of metrics.split("\n")) {
    const match = pattern.exec(line)
    if (!match) continue
    const labels = Object.fromEntries([...match[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]))
    const key = labels[label] ?? ""
    const le = labels.le === "+Inf" ? Infinity : Number(labels.le)
    byLabel.set(key, [...(byLabel.get(key) ?? []), [le, Number(match[2])]])
  }
  const result: Record<string, { count: number; p50AtMostMs: number; p99AtMostMs: number }> = {}
  for (const [key, buckets] of byLabel) {
    buckets.sort((a, b) => a[0] - b[0])
    const count = buckets[buckets.length - 1]?.[1] ?? 0
    if (count === 0) continue
    const bound = (q: number) => (buckets.find(([, c]) => c >= q * count)?.[0] ?? Infinity) * 1000
    result[key] = { count, p50AtMostMs: bound(0.5), p99AtMostMs: bound(0.99) }
  }
  return result
}

export const sentence = speechLike({ durationMs: 1800, seed: 5 })
/** Frames after the sentence's last voiced frame (SimCall's own "voiced" test). */
export const trailingFrames = (() => {
  const frames = sentence.length / FRAME_BYTES
  for (let i = frames - 1; i >= 0; i--) if (isVoicedFrame(sentence, undefined, i * FRAME_BYTES, (i + 1) * FRAME_BYTES)) return frames - 1 - i
  return 0
})()

export const runFallbackBench = async (options: FallbackBenchOptions = {}): Promise<FallbackBenchFigures> => {
  const dropCalls = options.calls ?? 100
  const breakerCalls = options.breakerCalls ?? 20
  const perSecond = options.perSecond ?? 25
  const twilio = await startFakeTwilio()
  let gateway: RunningGateway | undefined
  const pools: Array<DialInPool> = []
  const calls: Array<SimCall> = []
  try {
    gateway = await startGateway({
      build: options.build,
      env: { TWILIO_ACCOUNT_SID: ACCOUNT_SID, TWILIO_AUTH_TOKEN: AUTH_TOKEN, TWILIO_API_BASE_URL: twilio.url, LOG_LEVEL: "warn" }
    })
    const agentId = "bench_fallback"
    const phone = { errorFallbackType: "phone", errorFallbackValue: "+14155550100" }
    const environments = {
      warmUp: await createBenchEnvironment(gateway, agentId),
      disabled: await createBenchEnvironment(gateway, agentId),
      phone: await createBenchEnvironment(gateway, agentId, phone),
      breaker: await createBenchEnvironment(gateway, agentId, { ...phone, errorFallbackTimeout: 1, errorFallbackOccurrenceThreshold: 1 })
    }
    const dropTimes = { disabled: new Map<number, number>(), phone: new Map<number, number>() }
    const deadlines = new Map<number, number>()
    let breakerEndedEarly = 0

    const pool = (env: { environmentId: string; apiKey: string }, capacity: number, onStart: (index: number, drop: () => void) => void) => {
      const p = new DialInPool({ url: agentConnectUrl(gateway!.baseUrl, agentId, env.environmentId), apiKey: env.apiKey, capacity })
      p.on("call", (call) =>
        call.once("start", (start) => {
          const index = Number(start.customParameters.from?.slice(5))
          onStart(index, () => call.socket.terminate())
        })
      )
      pools.push(p.start())
      return p.waitForIdle(capacity, 30_000)
    }
    const half = Math.ceil(dropCalls / 2)
    const dropper = (times: Map<number, number>) => (index: number, drop: () => void) => {
      setTimeout(() => {
        times.set(index, nowUs())
        drop()
      }, 1500 + Math.random() * 2500)
    }
    await pool(environments.disabled, half, dropper(dropTimes.disabled))
    await pool(environments.phone, dropCalls - half, dropper(dropTimes.phone))
    await pool(environments.breaker, breakerCalls, () => {})

    // Warm-up: one dropped call first, reported on its own.
    const warmUp = new Map<number, number>()
    await pool(environments.warmUp, 1, dropper(warmUp))

    const place = async (index: number, environmentId: string) => {
      const call = await placeTwilioCall({
        gatewayUrl: gateway!.baseUrl,
        agentId,
        environmentId,
        authToken: AUTH_TOKEN,
        accountSid: ACCOUNT_SID,
        callSid: callSidOf(index),
        from: callerNumber(index)
      })
      calls.push(call)
      return call
    }
    const firstIndex = dropCalls + breakerCalls + 1
    await place(firstIndex, environments.warmUp.environmentId)
    for (let waited = 0; waited < 10_000 && !twilio.firstRequest.has(callSidOf(firstIndex)); waited += 50) await sleep(50)
    const startedAt = performance.now()
    const placing: Array<Promise<unknown>> = []
    for (let i = 1; i <= dropCalls + breakerCalls; i++) {
      const due = startedAt + ((i - 1) * 1000) / perSecond
      if (due > performance.now()) await sleep(due - performance.now())
      if (i <= dropCalls) {
        placing.push(place(i, i <= half ? environments.disabled.environmentId : environments.phone.environmentId))
      } else {
        placing.push(
          place(i, environments.breaker.environmentId).then(async (call) => {
            await call.pause(500)
            const played = await call.play(sentence)
            if (played.completed) deadlines.set(i, nowUs() - trailingFrames * FRAME_MS * 1000 + 1_000_000)
            else breakerEndedEarly++
          })
        )
      }
    }
    await Promise.allSettled(placing)
    // Wait for the last drops (up to 4 s after their call started) and for every trigger's request;
    // a trigger that gets none within 8 s counts as missing.
    const triggered = () => dropTimes.disabled.size + dropTimes.phone.size >= dropCalls
    const answered = () =>
      [...dropTimes.disabled.keys(), ...dropTimes.phone.keys(), ...deadlines.keys()].every((index) => twilio.firstRequest.has(callSidOf(index)))
    const waitUntil = performance.now() + 12_000
    while (performance.now() < waitUntil && !(triggered() && answered())) await sleep(50)

    const metrics = await fetch(`${gateway.baseUrl}/metrics`).then((res) => res.text(), () => "")
    const first = twilio.firstRequest.get(callSidOf(firstIndex))
    return {
      firstAfterStartMs: first && warmUp.has(firstIndex) ? round((first.atUs - warmUp.get(firstIndex)!) / 1000) : NaN,
      agentDrop: {
        disabled: delayFigures(dropTimes.disabled, twilio.firstRequest),
        phone: delayFigures(dropTimes.phone, twilio.firstRequest)
      },
      breakerTrip: delayFigures(deadlines, twilio.firstRequest, breakerEndedEarly),
      gatewayHistogram: histogramQuantiles(metrics, "callgate_fallback_carrier_request_delay_seconds", "trigger")
    }
  } finally {
    await Promise.all(calls.map((call) => (call.isOpen ? call.hangup("bench over").catch(() => undefined) : undefined)))
    await Promise.all(pools.map((p) => p.close()))
    await gateway?.stop()
    await twilio.close()
  }
}

await whenRunDirectly(import.meta.url, (arg) => runFallbackBench({ calls: arg("calls"), breakerCalls: arg("breaker-calls") }))
