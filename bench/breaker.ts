/**
 * Turn timing and the no-response breaker under load: N concurrent simulated calls (no sockets),
 * each a real TurnTiming.watchCall (two WebRTC VADs, the turn tracker, the response watchdog on
 * the real clock) fed 20 ms mu-law frames by its own timer, the way the relay feeds it.
 *
 * Each simulated call repeats: the caller says a real recorded sentence, then the simulated agent
 * either answers after a latency it picks (measured from the
 * caller's last loud frame to its own first loud frame: the ground truth), or stalls past the
 * response timeout first, so occurrences are recorded. Environments hold 5 calls each with
 * threshold 20, so nothing trips and every stall is measured. One call in three is on a noisy line:
 * the noisy recording, with that recording's own line noise (looped) between sentences, as one
 * line would sound; the others are clean lines (digital silence between sentences).
 *
 * Figures:
 * - occurrence lateness: when each occurrence was recorded (store call done) minus its deadline
 *   (the gateway's turn end + k * timeout), in ms;
 * - latency error: |latency the gateway measured - latency the agent actually used|, in ms;
 * - detection: caller sentences played vs turns found, and event-loop delay for context;
 * - turn accounting: each played sentence classified as a detected turn, an overlap, a correct
 *   merge, unfinished at the end of the window, or a miss, and the turns matched to no sentence
 *   (bench/turnAccounting.ts; docs/turns-and-breaker.md, "Turn accounting").
 *
 *   npx tsx bench/breaker.ts [--sessions 500] [--duration 30] [--redis redis://127.0.0.1:6379]
 */
import { readFileSync } from "node:fs"
import { loadavg } from "node:os"
import { monitorEventLoopDelay } from "node:perf_hooks"
import { fileURLToPath, pathToFileURL } from "node:url"
import { ConfigProvider, Effect, Layer, ManagedRuntime, Scope, Exit } from "effect"
import { Environments } from "../src/environments/Environments.js"
import { DomainLive, FoundationLive, LoggingLive, TurnsLive } from "../src/layers.js"
import { Metrics } from "../src/observability/Metrics.js"
import { TurnTiming, type WatchedCall } from "../src/turns/TurnTiming.js"
import { MULAW_TO_PCM } from "../src/audio/Mulaw.js"
import { VoiceActivity } from "../src/turns/VoiceActivity.js"
import { addCall, classifyCall, emptyAccount, type PlayedSentence, type TurnAccount } from "./turnAccounting.js"

export interface BreakerBenchOptions {
  readonly sessions?: number
  readonly durationMs?: number
  /** Use the Redis breaker store at this URL (default: the in-memory store). */
  readonly redisUrl?: string
  readonly timeoutSeconds?: number
}

export interface Percentiles {
  readonly count: number
  readonly p50: number
  readonly p99: number
  readonly max: number
}

export interface BreakerBenchFigures {
  readonly sessions: number
  readonly durationMs: number
  readonly store: "memory" | "redis"
  /** Occurrence recorded minus its deadline, ms (target: p99 < 20). */
  readonly occurrenceLatenessMs: Percentiles
  /** |measured - actual| per answered turn, ms (target: within 20, one frame). */
  readonly latencyErrorMs: Percentiles & { readonly withinOneFrame: number }
  /** Caller sentences played, turns the gateway found, and answered turns matched to a sentence. */
  readonly callerSentences: number
  readonly turnsDetected: number
  readonly turnsMatched: number
  /** Every played sentence classified (see bench/turnAccounting.ts). */
  readonly turnAccount: TurnAccount
  readonly eventLoopDelayMs: { readonly p50: number; readonly p99: number; readonly max: number }
  /** How late plain setTimeout callbacks fired in the same process meanwhile: the floor for any timer. */
  readonly plainTimerLatenessMs: Percentiles
  /** The machine's 1-minute load average at the end (the bench shares its cores with anything else running). */
  readonly loadAverage: number
  readonly cpuSeconds: number
  /** Resident memory with every call live, MB. */
  readonly rssMb: number
}

const FRAME = 160
const FRAME_MS = 20
const ENV_SIZE = 5

const clip = (name: string) => new Uint8Array(readFileSync(fileURLToPath(new URL(`../test/fixtures/audio/${name}.ulaw`, import.meta.url))))

/** Indices of a clip's first and last frames above -60 dBFS (the clean recordings' silence is below -75): where speech really is. */
const loudSpan = (audio: Uint8Array) => {
  let first = -1
  let last = -1
  for (let i = 0; i + FRAME <= audio.length; i += FRAME) {
    let power = 0
    for (let j = 0; j < FRAME; j++) power += MULAW_TO_PCM[audio[i + j]!]! ** 2
    if (power / FRAME > 1000) {
      if (first < 0) first = i / FRAME
      last = i / FRAME
    }
  }
  return { first, last }
}

const percentiles = (values: ReadonlyArray<number>): Percentiles => {
  const sorted = [...values].sort((a, b) => a - b)
  const at = (q: number) => (sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!)
  const round = (n: number) => Math.round(n * 100) / 100
  return { count: sorted.length, p50: round(at(0.5)), p99: round(at(0.99)), max: round(sorted[sorted.length - 1] ?? NaN) }
}

/** The production graph's turn timing and breaker (src/layers.ts), over the domain and foundation, logs off; REDIS_URL picks the stores. */
const layerFor = (redisUrl: string | undefined) => {
  const env: Record<string, string> = { ADMIN_API_KEY: "bench-admin-key-0123456789", LOG_LEVEL: "none" }
  if (redisUrl) {
    Object.assign(env, { REDIS_URL: redisUrl, SECRETS_KEY: Buffer.alloc(32, 9).toString("base64"), REDIS_KEY_PREFIX: `bench-breaker-${process.pid}:` })
  }
  return TurnsLive.pipe(
    Layer.provideMerge(DomainLive),
    Layer.provideMerge(FoundationLive),
    Layer.provide(LoggingLive),
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
  )
}

interface Truth {
  startedAtEpoch: number
  endedAtEpoch: number
  actualMs: number | undefined
}

export const runBreakerBench = async (options: BreakerBenchOptions = {}): Promise<BreakerBenchFigures> => {
  const sessionCount = options.sessions ?? 500
  const durationMs = options.durationMs ?? 30_000
  const timeoutMs = (options.timeoutSeconds ?? 1) * 1000
  const runtime = ManagedRuntime.make(layerFor(options.redisUrl))
  const timing = await runtime.runPromise(TurnTiming)
  const vad = await runtime.runPromise(VoiceActivity)

  const silence = new Uint8Array(FRAME).fill(0xff)
  const greeting = clip("agent-greeting")
  const greetingStart = loudSpan(greeting).first
  const cleanSentences = [
    { audio: clip("caller-appointment"), ...loudSpan(clip("caller-appointment")) },
    { audio: clip("caller-account"), ...loudSpan(clip("caller-account")) }
  ]
  // The noisy recording is the clean one over line noise: speech ends where the clean one's does.
  const clean = loudSpan(clip("caller-appointment"))
  const noisy = { audio: clip("caller-appointment-noisy"), first: clean.first, last: clean.last }
  /** That line's noise alone: the recording after the speech (and the VAD's hangover) is over. */
  const lineNoise = noisy.audio.subarray((noisy.last + 8) * FRAME, Math.floor(noisy.audio.length / FRAME) * FRAME)

  const lateness: Array<number> = []
  const errors: Array<number> = []
  let callerSentences = 0
  let turnsMatched = 0
  let turnsDetected = 0
  const delay = monitorEventLoopDelay({ resolution: 10 })
  const scope = await runtime.runPromise(Scope.make())
  const timers: Array<NodeJS.Timeout> = []
  const epoch = (perfMs: number) => performance.timeOrigin + perfMs
  const random = (min: number, max: number) => min + Math.random() * (max - min)

  const startSession = async (index: number) => {
    const truths: Array<Truth> = []
    let occurrencesThisTurn = 0
    let turnsSeen = 0
    const call: WatchedCall = await runtime.runPromise(
      timing
        .watchCall({
          agentId: "bench-agent",
          environmentId: `bench-env-${Math.floor(index / ENV_SIZE)}`,
          sessionId: `bench-session-${index}`,
          settings: Effect.succeed({ timeoutSeconds: timeoutMs / 1000, threshold: 20, windowSeconds: 60 }),
          onOccurrence: () => {
            const now = epoch(performance.now())
            const turns = call.turns()
            const turn = turns[turns.length - 1]
            if (turn === undefined) return
            if (turns.length !== turnsSeen) {
              turnsSeen = turns.length
              occurrencesThisTurn = 0
            }
            occurrencesThisTurn++
            lateness.push(now - (Date.parse(turn.callerEndedAt) + occurrencesThisTurn * timeoutMs))
          }
        })
        .pipe(Scope.extend(scope))
    )
    const { observer } = call

    let phase: "pause" | "caller" | "waiting" | "agent" = "pause"
    let resumeAt = performance.now() + random(0, 3000)
    const noisyLine = index % 3 === 2
    const sentences = noisyLine ? [noisy] : cleanSentences
    let sentence = sentences[0]!
    let callerFrame = 0
    let agentFrame = 0
    let agentStartAt = 0
    let noiseFrame = Math.floor(Math.random() * (lineNoise.length / FRAME))
    let truth: Truth | undefined

    const background = () => {
      if (!noisyLine) return silence
      noiseFrame = (noiseFrame + 1) % (lineNoise.length / FRAME)
      return lineNoise.subarray(noiseFrame * FRAME, noiseFrame * FRAME + FRAME)
    }

    const tick = () => {
      const at = performance.now()
      // Caller direction.
      if (phase === "pause" && at >= resumeAt) {
        phase = "caller"
        callerFrame = 0
        sentence = sentences[Math.floor(Math.random() * sentences.length)]!
        callerSentences++
        truth = { startedAtEpoch: NaN, endedAtEpoch: NaN, actualMs: undefined }
        truths.push(truth)
      }
      if (phase === "caller") {
        observer.callerAudio(sentence.audio.subarray(callerFrame * FRAME, callerFrame * FRAME + FRAME), at)
        if (callerFrame === sentence.first && truth) truth.startedAtEpoch = epoch(at)
        if (callerFrame === sentence.last && truth) {
          truth.endedAtEpoch = epoch(at)
          // A quarter of the answers come only after the response timeout (once or twice).
          const stall = Math.random() < 0.25
          agentStartAt = at + (stall ? random(timeoutMs + 150, 2 * timeoutMs + 800) : random(200, 2500))
        }
        callerFrame++
        if ((callerFrame + 1) * FRAME > sentence.audio.length) phase = "waiting"
      } else {
        observer.callerAudio(background(), at)
      }
      // Agent direction.
      if (phase === "waiting" && at >= agentStartAt - FRAME_MS / 2) {
        phase = "agent"
        agentFrame = greetingStart
        if (truth) truth.actualMs = epoch(at) - truth.endedAtEpoch
      }
      if (phase === "agent") {
        observer.agentAudio(greeting.subarray(agentFrame * FRAME, agentFrame * FRAME + FRAME), at)
        agentFrame++
        if ((agentFrame + 1) * FRAME > greeting.length) {
          phase = "pause"
          resumeAt = at + random(300, 1500)
        }
      } else {
        observer.agentAudio(silence, at)
      }
    }

    await new Promise((resolve) => setTimeout(resolve, Math.random() * FRAME_MS))
    timers.push(setInterval(tick, FRAME_MS))
    return { call, truths }
  }

  // A probe of plain timers with deadlines like the watchdogs' (about a second away).
  const plainLateness: Array<number> = []
  let probing = true
  const probe = () => {
    if (!probing) return
    const due = performance.now() + random(500, 1500)
    setTimeout(() => {
      plainLateness.push(performance.now() - due)
      probe()
    }, due - performance.now())
  }
  for (let i = 0; i < 20; i++) probe()

  const cpuBefore = process.cpuUsage()
  const started = await Promise.all(Array.from({ length: sessionCount }, (_, i) => startSession(i)))
  delay.enable()
  await new Promise((resolve) => setTimeout(resolve, durationMs))
  delay.disable()
  probing = false
  const rssMb = Math.round(process.memoryUsage().rss / 1e6)
  for (const timer of timers) clearInterval(timer)
  const cpu = process.cpuUsage(cpuBefore)
  const observedUntil = epoch(performance.now())
  let turnAccount = emptyAccount()

  for (const { call, truths } of started) {
    const answered = call.turns().filter((turn) => turn.latencyMs !== null)
    const used = new Set<number>()
    // A sentence whose speech had not begun when the window closed was not played.
    const played: Array<PlayedSentence> = truths.filter((truth) => !Number.isNaN(truth.startedAtEpoch)).map((truth) => ({
      startedAtMs: truth.startedAtEpoch,
      // A sentence still being spoken when the window closed has not ended yet.
      speechEndedAtMs: Number.isNaN(truth.endedAtEpoch) ? observedUntil : truth.endedAtEpoch,
      agentStartedAtMs: truth.actualMs === undefined ? undefined : truth.endedAtEpoch + truth.actualMs
    }))
    const reported = call.turns().map((turn) => ({ endedAtMs: Date.parse(turn.callerEndedAt) }))
    turnAccount = addCall(
      turnAccount,
      classifyCall(played, reported, { turnEndSilenceMs: vad.settings.turnEndSilenceMs, toleranceMs: 150, observedUntilMs: observedUntil })
    )
    for (const truth of truths) {
      if (truth.actualMs === undefined) continue
      const turn = answered.find((t) => !used.has(t.index) && Math.abs(Date.parse(t.callerEndedAt) - truth.endedAtEpoch) <= 150)
      if (turn === undefined) continue
      used.add(turn.index)
      turnsMatched++
      errors.push(Math.abs(turn.latencyMs! - truth.actualMs))
    }
    turnsDetected += call.turns().length
  }
  await runtime.runPromise(Scope.close(scope, Exit.void))
  await runtime.dispose()

  const latencyErrorMs = percentiles(errors)
  return {
    sessions: sessionCount,
    durationMs,
    store: options.redisUrl ? "redis" : "memory",
    occurrenceLatenessMs: percentiles(lateness),
    latencyErrorMs: { ...latencyErrorMs, withinOneFrame: Math.round((errors.filter((e) => e <= FRAME_MS).length / errors.length) * 1000) / 1000 },
    callerSentences,
    turnsDetected,
    turnsMatched,
    turnAccount,
    eventLoopDelayMs: {
      p50: Math.round(delay.percentile(50) / 1e4) / 100,
      p99: Math.round(delay.percentile(99) / 1e4) / 100,
      max: Math.round(delay.max / 1e4) / 100
    },
    plainTimerLatenessMs: percentiles(plainLateness),
    loadAverage: Math.round(loadavg()[0]! * 100) / 100,
    cpuSeconds: Math.round(((cpu.user + cpu.system) / 1e6) * 10) / 10,
    rssMb
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(`--${name}`)
    return i > 0 ? process.argv[i + 1] : undefined
  }
  const figures = await runBreakerBench({
    sessions: Number(arg("sessions") ?? 500),
    durationMs: Number(arg("duration") ?? 30) * 1000,
    ...(arg("redis") ? { redisUrl: arg("redis")! } : {})
  })
  process.stdout.write(JSON.stringify(figures, null, 2) + "\n")
  process.exit(0)
}
