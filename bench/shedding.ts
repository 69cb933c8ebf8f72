/**
 * Shedding at the entry while the breaker is open (docs/fallback.md, "Shedding"): callgate runs as
 * its own process, pointed at a small Twilio-compatible REST server on loopback; simulated Twilio
 * calls and dial-in agents that never answer run here. Two environments with a phone fallback,
 * threshold 1 and errorFallbackTimeout `timeoutSeconds`: one sheds new calls (the default), one
 * does not (`errorFallbackShedNewCalls: false`). One stalled call trips each.
 *
 * - Entry answer of a shed call: the voice webhook posted as Twilio posts it (signed), timed from
 *   the request's start to the last byte of the answer, `calls` of them at `perSecond`, then a
 *   quarter as many one at a time, after the probe took its slot (BREAKER_PROBE_INTERVAL 1h: one
 *   probe for the run) and a few warm-up entries. Every answer must be the fallback's `<Dial>`;
 *   the agents must get no call.
 * - Silence before the fallback: from the entry request to the moment the fallback reaches the
 *   carrier. Shedding on: the fallback is the entry answer itself, so this is the figure above.
 *   Shedding off: the call goes to a stalled agent; the caller speaks one sentence (1.8 s) and waits;
 *   the fallback arrives as a REST call update when the breaker's deadline passes. Also given from
 *   the caller's last voiced frame, which is errorFallbackTimeout plus how late the turn's end is seen.
 *
 *   npx tsx bench/shedding.ts [--calls 200] [--off-calls 20]
 */
import { agentConnectUrl, DialInPool } from "../examples/agents/agent-host.js"
import { twilioSignature } from "../sim/CallEntry.js"
import { nowUs } from "../sim/FrameStamp.js"
import { FRAME_MS } from "../sim/Mulaw.js"
import type { SimCall } from "../sim/SimCall.js"
import { placeTwilioCall } from "../sim/TwilioCall.js"
import { cpuSecondsOf, sleep, whenRunDirectly } from "./benchProcess.js"
import { callerNumber } from "./carrierSim.js"
import { ACCOUNT_SID, AUTH_TOKEN, callSidOf, percentile, sentence, startFakeTwilio, trailingFrames } from "./fallback.js"
import { createBenchEnvironment, type RunningGateway, startGateway } from "./systemUnderTest.js"

export interface SheddingBenchOptions {
  /** Shed calls timed at the entry. Default 200. */
  readonly calls?: number
  /** Entry requests per second. Default 50. */
  readonly perSecond?: number
  /** Calls to the environment that does not shed (each waits for its fallback). Default 20. */
  readonly offCalls?: number
  /** errorFallbackTimeout of both environments, seconds. Default 2. */
  readonly timeoutSeconds?: number
  /** Compiled tree to run callgate from (build.ts); default: the sources through tsx. */
  readonly build?: string
}

export interface Spread {
  readonly count: number
  readonly p50: number
  readonly p99: number
  readonly max: number
}

export interface SheddingBenchFigures {
  readonly timeoutSeconds: number
  /** Entry request to entry answer of a shed call, ms (target p99 < 50 ms), at `perSecond`. */
  readonly shedEntryMs: Spread
  readonly perSecond: number
  /** The same, one request at a time (a quarter as many, at least 10). */
  readonly shedEntryOneAtATimeMs: Spread
  /** callgate's CPU time (user + system, /proc) over the timed shed entries, per entry: the answer's cost whatever the machine's load. */
  readonly cpuMsPerShedEntry: number
  /** The first shed entry after start-up (lazy loading, new connection), ms, measured apart. */
  readonly firstShedEntryMs: number
  /** Shed answers that were not the fallback's <Dial> (must be 0). */
  readonly notFallback: number
  /** Calls the shedding environment's agents took after the trip (must be 0: the probe's stream is never opened here). */
  readonly agentCallsWhileShedding: number
  /** What callgate counted (callgate_breaker_shed_calls_total), warm-up included. */
  readonly gatewayShedCount: number
  /** Entry request to the fallback reaching the carrier, ms. */
  readonly silenceMs: {
    readonly shedOn: Spread
    readonly shedOff: Spread
    /** Shedding off, from the caller's last voiced frame. */
    readonly shedOffAfterLastWord: Spread
    /** Shedding off: calls whose fallback did not arrive within the wait. */
    readonly shedOffMissing: number
  }
}

const WARM_UP = 5
const round = (n: number) => Math.round(n * 100) / 100
const spread = (values: ReadonlyArray<number>): Spread => {
  const sorted = [...values].sort((a, b) => a - b)
  return { count: sorted.length, p50: round(percentile(sorted, 50)), p99: round(percentile(sorted, 99)), max: round(sorted[sorted.length - 1] ?? NaN) }
}

export const runSheddingBench = async (options: SheddingBenchOptions = {}): Promise<SheddingBenchFigures> => {
  const shedCalls = options.calls ?? 200
  const perSecond = options.perSecond ?? 50
  const offCalls = options.offCalls ?? 20
  const timeoutSeconds = options.timeoutSeconds ?? 2
  const twilio = await startFakeTwilio()
  let gateway: RunningGateway | undefined
  const pools: Array<DialInPool> = []
  const calls: Array<SimCall> = []
  try {
    gateway = await startGateway({
      build: options.build,
      env: {
        TWILIO_ACCOUNT_SID: ACCOUNT_SID,
        TWILIO_AUTH_TOKEN: AUTH_TOKEN,
        TWILIO_API_BASE_URL: twilio.url,
        BREAKER_PROBE_INTERVAL: "1h",
        LOG_LEVEL: "warn"
      }
    })
    const g = gateway
    const agentId = "bench_shedding"
    const settings = {
      errorFallbackType: "phone",
      errorFallbackValue: "+14155550100",
      errorFallbackTimeout: timeoutSeconds,
      errorFallbackOccurrenceThreshold: 1,
      errorFallbackTimeWindow: 3600
    }
    const on = await createBenchEnvironment(g, agentId, settings)
    const off = await createBenchEnvironment(g, agentId, { ...settings, errorFallbackShedNewCalls: false })

    // Agents that take calls and never answer; the shedding environment's count its calls.
    let onAgentCalls = 0
    const pool = async (env: { environmentId: string; apiKey: string }, capacity: number, onCall: () => void = () => {}) => {
      const p = new DialInPool({ url: agentConnectUrl(g.baseUrl, agentId, env.environmentId), apiKey: env.apiKey, capacity })
      p.on("call", onCall)
      pools.push(p.start())
      await p.waitForIdle(capacity, 30_000)
    }
    await pool(on, 2, () => onAgentCalls++)
    await pool(off, 1 + offCalls)

    let index = 0
    const place = async (environmentId: string, callIndex: number) => {
      const call = await placeTwilioCall({
        gatewayUrl: g.baseUrl,
        agentId,
        environmentId,
        authToken: AUTH_TOKEN,
        accountSid: ACCOUNT_SID,
        callSid: callSidOf(callIndex),
        from: callerNumber(callIndex)
      })
      calls.push(call)
      return call
    }
    const waitForRequest = async (callIndex: number, ms: number) => {
      for (let waited = 0; waited < ms && !twilio.firstRequest.has(callSidOf(callIndex)); waited += 20) await sleep(20)
      return twilio.firstRequest.get(callSidOf(callIndex))
    }
    /** One stalled call trips the environment's breaker (threshold 1). */
    const trip = async (environmentId: string) => {
      const i = ++index
      const call = await place(environmentId, i)
      await call.pause(300)
      await call.play(sentence)
      if ((await waitForRequest(i, 15_000)) === undefined) throw new Error("the stalled call was not rescued: the breaker did not trip")
    }
    await trip(on.environmentId)
    await trip(off.environmentId)
    const agentCallsAtTrip = onAgentCalls

    // The voice webhook as Twilio posts it, timed to the answer's last byte.
    const path = `/telephony/twilio/voice?agentId=${agentId}&environmentId=${on.environmentId}`
    const entry = async (callIndex: number) => {
      const params = {
        CallSid: callSidOf(callIndex),
        AccountSid: ACCOUNT_SID,
        From: callerNumber(callIndex),
        To: "+15550100002",
        Direction: "inbound",
        CallStatus: "ringing",
        ApiVersion: "2010-04-01"
      }
      const headers = { "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": twilioSignature(AUTH_TOKEN, `${g.baseUrl}${path}`, params) }
      const started = performance.now()
      const res = await fetch(`${g.baseUrl}${path}`, { method: "POST", headers, body: new URLSearchParams(params).toString() })
      const body = await res.text()
      return { ms: performance.now() - started, status: res.status, body }
    }
    const isDial = (answer: { status: number; body: string }) => answer.status === 200 && answer.body.includes("<Dial") && !answer.body.includes("<Stream")

    // The probe takes the slot (its stream is never opened: the agent's reservation lapses).
    const probe = await entry(++index)
    if (!probe.body.includes("<Stream")) throw new Error(`the first call after the trip was not the probe: ${probe.body.slice(0, 200)}`)
    let notFallback = 0
    let firstShedEntryMs = NaN
    for (let i = 0; i < WARM_UP; i++) {
      const answer = await entry(++index)
      if (i === 0) firstShedEntryMs = round(answer.ms)
      if (!isDial(answer)) notFallback++
    }
    const timings: Array<number> = []
    const cpuBefore = cpuSecondsOf(g.pid)
    const startedAt = performance.now()
    const entries: Array<Promise<void>> = []
    for (let i = 0; i < shedCalls; i++) {
      const due = startedAt + (i * 1000) / perSecond
      if (due > performance.now()) await sleep(due - performance.now())
      const callIndex = ++index
      entries.push(
        entry(callIndex).then((answer) => {
          timings.push(answer.ms)
          if (!isDial(answer)) notFallback++
        })
      )
    }
    await Promise.all(entries)
    // The same, one at a time: the answer's own cost, without the queue a burst builds.
    const oneAtATime: Array<number> = []
    for (let i = 0; i < Math.max(10, Math.round(shedCalls / 4)); i++) {
      const answer = await entry(++index)
      oneAtATime.push(answer.ms)
      if (!isDial(answer)) notFallback++
    }
    const cpuMsPerShedEntry = round(((cpuSecondsOf(g.pid) - cpuBefore) * 1000) / (timings.length + oneAtATime.length))

    // Shedding off: each new call goes to a stalled agent and waits for the breaker's deadline.
    const offEntries = new Map<number, number>()
    const lastWords = new Map<number, number>()
    const offPlaced: Array<Promise<unknown>> = []
    for (let i = 0; i < offCalls; i++) {
      const callIndex = ++index
      offEntries.set(callIndex, nowUs())
      offPlaced.push(
        place(off.environmentId, callIndex).then(async (call) => {
          await call.pause(300)
          const played = await call.play(sentence)
          if (played.completed) lastWords.set(callIndex, nowUs() - trailingFrames * FRAME_MS * 1000)
        })
      )
      await sleep(100)
    }
    await Promise.allSettled(offPlaced)
    const waitUntil = performance.now() + (timeoutSeconds + 10) * 1000
    while (performance.now() < waitUntil && ![...offEntries.keys()].every((i) => twilio.firstRequest.has(callSidOf(i)))) await sleep(50)
    const offSilence: Array<number> = []
    const offAfterWord: Array<number> = []
    let shedOffMissing = 0
    for (const [callIndex, enteredUs] of offEntries) {
      const request = twilio.firstRequest.get(callSidOf(callIndex))
      if (request === undefined) {
        shedOffMissing++
        continue
      }
      offSilence.push((request.atUs - enteredUs) / 1000)
      const lastWord = lastWords.get(callIndex)
      if (lastWord !== undefined) offAfterWord.push((request.atUs - lastWord) / 1000)
    }

    const metrics = await fetch(`${g.baseUrl}/metrics`).then((res) => res.text(), () => "")
    const shedLine = metrics.split("\n").find((l) => l.startsWith("callgate_breaker_shed_calls_total{") && l.includes(`environment="${on.environmentId}"`))
    const shedEntry = spread(timings)
    return {
      timeoutSeconds,
      shedEntryMs: shedEntry,
      perSecond,
      shedEntryOneAtATimeMs: spread(oneAtATime),
      cpuMsPerShedEntry,
      firstShedEntryMs,
      notFallback,
      agentCallsWhileShedding: onAgentCalls - agentCallsAtTrip,
      gatewayShedCount: shedLine === undefined ? 0 : Number(shedLine.split(" ").at(-1)),
      silenceMs: { shedOn: shedEntry, shedOff: spread(offSilence), shedOffAfterLastWord: spread(offAfterWord), shedOffMissing }
    }
  } finally {
    await Promise.all(calls.map((call) => (call.isOpen ? call.hangup("bench over").catch(() => undefined) : undefined)))
    await Promise.all(pools.map((p) => p.close()))
    await gateway?.stop()
    await twilio.close()
  }
}

await whenRunDirectly(import.meta.url, (arg) => runSheddingBench({ calls: arg("calls"), offCalls: arg("off-calls") }))
