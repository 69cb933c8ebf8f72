/**
 * Per-call work of callgate in one process, deterministically: N calls placed through the real
 * carrier stream leg (Twilio dialect, media fast path), the session registry and relay, turn
 * timing (both VADs, the tracker, the response watchdog and breaker) and a dial-in agent
 * connection, fed M seconds of frames on virtual time (Effect TestClock for the fibers, a virtual
 * `performance.now` for the relay's frame times). Sockets are replaced by fakes that only count
 * what is sent: no kernel, no `ws`, no timers of the host, so the same run executes the same work
 * whatever else the machine does, and instruction counts (valgrind's callgrind) compare builds
 * exactly where wall-clock benchmarks on a shared machine cannot.
 *
 * Traffic as `npm run bench` plays it: the caller says the recorded sentences with 6.5-8 s pauses,
 * every frame stamped in its first 32 bytes (pauses are a quiet line, under the VAD's energy gate); the agent
 * sends stamped silence, and its reply 900 ms after each sentence ends (700 ms of end-of-turn
 * silence plus 200 ms). The carrier echoes every mark it is sent at its next frame, as the
 * simulator does once the audio before it has played (`--no-mark-echo`: it does not).
 *
 *   npx tsx bench/callCost.ts --calls 20 --seconds 12 [--timeout 3] [--recording] [--driver-only] [--count-fibers] [--no-mark-echo]
 *
 * `--recording` records every call (the environment's `recording: "on"`, into a temporary
 * RECORDINGS_DIR; the clock moves so the recorder's ticker writes once a second): the recorder's
 * per-call work is the difference from a run without it (docs/recording.md, "Cost").
 *
 * Instructions per call-second: run it twice under callgrind with two durations and divide the
 * difference (start-up and warm-up cancel out); `--single-threaded` keeps V8's compilers and
 * collector on the main thread, so repeated counts agree (docs/benchmarks.md, "Per-call work, counted"):
 *
 *   valgrind --tool=callgrind --callgrind-out-file=/dev/null node --single-threaded <compiled>/bench/callCost.js --calls 10 --seconds 2
 *   valgrind --tool=callgrind --callgrind-out-file=/dev/null node --single-threaded <compiled>/bench/callCost.js --calls 10 --seconds 12
 *   (I refs of the second - I refs of the first) / (10 s x calls)
 *
 * `--driver-only` builds and discards the same frames without handing them to callgate: the
 * driver's own share, to subtract. It also prints heap+external bytes per call (after a full
 * collection when run with --expose-gc) and the fibers alive per call. After the calls hang up, a
 * second line gives what each ended call left behind (its stored record, and anything still
 * holding on to it); `CALLCOST_SNAPSHOT=FILE` writes a heap snapshot at that moment.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { ConfigProvider, Effect, Layer, Supervisor, TestClock, TestContext } from "effect"
import { AgentConnection } from "../src/agent/AgentConnection.js"
import { AgentPool } from "../src/agent/AgentPool.js"
import type { WireListener, WireSocket } from "../src/frames/WireSocket.js"
import { Environments } from "../src/environments/Environments.js"
import { Metrics } from "../src/observability/Metrics.js"
import { appServicesLayer } from "../src/layers.js"
import { LiveCalls } from "../src/livecall/LiveCalls.js"
import { SessionTokens } from "../src/telephony/SessionTokens.js"
import { CarrierStreams } from "../src/telephony/streams/CarrierStreams.js"
import { nowUs, writeStamp } from "../sim/FrameStamp.js"
import { twilioInboundEncoder, twilioOutboundEncoder } from "../src/frames/TwilioFrames.js"

const { values: args } = parseArgs({
  options: {
    calls: { type: "string", default: "20" },
    seconds: { type: "string", default: "12" },
    timeout: { type: "string", default: "0" },
    recording: { type: "boolean", default: false },
    "driver-only": { type: "boolean", default: false },
    "count-fibers": { type: "boolean", default: false },
    "no-mark-echo": { type: "boolean", default: false }
  }
})
const CALLS = Number(args.calls)
const SECONDS = Number(args.seconds)
const TIMEOUT_SECONDS = Number(args.timeout)
const DRIVER_ONLY = args["driver-only"] === true
const RECORDING = args.recording === true
const RECORDINGS_DIR = RECORDING ? mkdtempSync(join(tmpdir(), "callgate-callcost-recordings-")) : undefined
const COUNT_FIBERS = args["count-fibers"] === true
/** The carrier does not echo marks (as before callgate's playout marks existed: compare with older commits). */
const MARK_ECHO = args["no-mark-echo"] !== true
/** The Effect clock moves (and woken fibers run) every this many frames: often enough for timers, cheap for the driver. */
const TICKS_PER_ADVANCE = 25
const FRAME_MS = 20
const FRAME_BYTES = 160
const SILENCE = 0xff
const AGENT_ID = "agent_bench"

const fixture = (name: string) => readFileSync(new URL(`../test/fixtures/audio/${name}.ulaw`, import.meta.url))
const sentences = [fixture("caller-appointment"), fixture("caller-account"), fixture("caller-appointment-noisy")]
const reply = fixture("agent-greeting")

/** A deterministic stand-in for Math.random, so every run plays the same pauses. */
let seed = 12345
const random = (low: number, high: number) => {
  seed = (seed * 1103515245 + 12345) % 2 ** 31
  return low + (seed / 2 ** 31) * (high - low)
}

/** Virtual time for the relay's frame stamps (LiveCall reads performance.now()). */
let virtualMs = 1_000_000
performance.now = () => virtualMs

/** A socket that keeps nothing: counts messages and bytes, as the kernel would take them. */
class FakeSocket implements WireSocket {
  listener: WireListener | undefined
  isOpen = true
  bufferedAmount = 0
  messages = 0
  chars = 0
  /** Names of the marks sent here, not yet echoed (the carrier's side echoes them, as Twilio does). */
  readonly marks: Array<string> = []
  send(text: string): void {
    if (!this.isOpen) return
    this.messages++
    this.chars += text.length
    if (text.startsWith('{"event":"mark"')) this.marks.push((JSON.parse(text) as { mark: { name: string } }).mark.name)
  }
  sendAscii(text: string): void {
    this.send(text)
  }
  close(code: number, reason: string): void {
    if (!this.isOpen) return
    this.isOpen = false
    this.listener?.onClose(code, reason, undefined)
  }
  listen(listener: WireListener): void {
    this.listener = listener
  }
  heartbeat(): boolean {
    return this.isOpen
  }
  deliver(text: string): void {
    this.listener?.onText(text)
  }
}

/** One call's script: caller sentences and pauses, the agent's reply after each sentence. */
class ScriptedCall {
  readonly carrier = new FakeSocket()
  readonly agent = new FakeSocket()
  readonly callSid: string
  readonly streamSid: string
  private readonly inbound: ReturnType<typeof twilioInboundEncoder>
  private readonly outbound: ReturnType<typeof twilioOutboundEncoder>
  private readonly frame = Buffer.alloc(FRAME_BYTES)
  private seq = 0
  private chunk = 0
  private agentSeq = 0
  /** Caller: the sentence playing (or undefined in a pause), its offset, the pause's end. */
  private sentence: Buffer | undefined
  private sentenceIndex: number
  private offset = 0
  private pauseFrames: number
  /** Agent: frames until its reply starts (-1: none due), the reply's offset (-1: not replying). */
  private replyIn = -1
  private replyOffset = -1

  constructor(readonly index: number) {
    this.callSid = `CA${String(index).padStart(32, "0")}`
    this.streamSid = `MZ${String(index).padStart(32, "0")}`
    this.inbound = twilioInboundEncoder(this.streamSid)
    this.outbound = twilioOutboundEncoder(this.streamSid)
    this.sentenceIndex = index
    this.pauseFrames = Math.round(random(0, 5000) / FRAME_MS)
  }

  private stamped(source: Buffer | undefined, offset: number, callId: number, seq: number): string {
    if (source === undefined) this.frame.fill(SILENCE)
    else source.copy(this.frame, 0, offset, offset + FRAME_BYTES)
    writeStamp(this.frame, callId, seq, Math.round(virtualMs * 1000))
    return this.frame.toString("base64")
  }

  /** The caller's next frame, as the socket delivers it (a flat string). */
  callerFrame(): string {
    if (this.sentence === undefined && --this.pauseFrames <= 0) {
      this.sentence = sentences[this.sentenceIndex++ % sentences.length]
      this.offset = 0
    }
    const playing = this.sentence
    const payload = this.stamped(playing, this.offset, this.index, ++this.seq)
    if (playing !== undefined) {
      this.offset += FRAME_BYTES
      if (this.offset + FRAME_BYTES > playing.length) {
        this.sentence = undefined
        this.pauseFrames = Math.round(random(6500, 8000) / FRAME_MS)
        this.replyIn = 900 / FRAME_MS
      }
    }
    this.chunk++
    return Buffer.from(this.inbound.media(this.seq, this.chunk, this.chunk * FRAME_MS, payload)).toString()
  }

  /** The carrier's echoes of the marks it was sent since the last frame (it plays at once: there is no queue here). */
  markEchoes(): Array<string> {
    const echoes = this.carrier.marks.map((name) => this.inbound.mark(++this.seq, name))
    this.carrier.marks.length = 0
    return echoes
  }

  agentFrame(): string {
    if (this.replyIn >= 0 && --this.replyIn < 0) this.replyOffset = 0
    const replying = this.replyOffset >= 0
    const payload = this.stamped(replying ? reply : undefined, this.replyOffset, 1_000_000 + this.index, ++this.agentSeq)
    if (replying) {
      this.replyOffset += FRAME_BYTES
      if (this.replyOffset + FRAME_BYTES > reply.length) this.replyOffset = -1
    }
    return Buffer.from(this.outbound.media(payload)).toString()
  }
}

/** A macrotask: the fibers woken by the frames (and by the clock) run up to their next wait. */
const macrotask = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
/**
 * Moves the Effect clock (only when something is timed: with the response timeout off no per-call
 * timer is due, and the app's background tickers would only add the same work to every run) and
 * lets the woken fibers run.
 */
const advance = (frames: number) =>
  Effect.zipRight(TIMEOUT_SECONDS > 0 || RECORDING ? TestClock.adjust(FRAME_MS * frames) : Effect.void, Effect.zipRight(macrotask, macrotask))

const supervisor = Effect.runSync(Supervisor.track)

const program = Effect.gen(function* () {
  const environments = yield* Environments
  const tokens = yield* SessionTokens
  const streams = yield* CarrierStreams
  const pool = yield* AgentPool
  const registry = yield* LiveCalls
  const metrics = yield* Metrics
  const environment = yield* environments.create(AGENT_ID, { name: "bench", ...(RECORDING ? { recording: "on" as const } : {}) })
  if (TIMEOUT_SECONDS > 0) yield* environments.update(AGENT_ID, environment.id, { errorFallbackTimeout: TIMEOUT_SECONDS })
  const calls = Array.from({ length: CALLS }, (_, i) => new ScriptedCall(i + 1))
  const fibersBefore = COUNT_FIBERS ? (yield* supervisor.value).length : 0
  ;(globalThis as { gc?: () => void }).gc?.()
  const memoryBefore = process.memoryUsage()
  if (!DRIVER_ONLY) {
    for (const call of calls) {
      pool.offer(AGENT_ID, environment.id, new AgentConnection(call.agent))
      // As the call's admission issues it: with the environment's recording mode it read.
      const token = tokens.issue({ agentId: AGENT_ID, environmentId: environment.id, kind: "twilio", callId: call.callSid, recording: RECORDING ? "on" : "off" })
      const leg = streams.acceptTwilio(call.carrier, { url: "/telephony/twilio/stream", headers: {}, address: "127.0.0.1" })
      if (leg === undefined) return yield* Effect.dieMessage("the stream was refused")
      const encoder = twilioInboundEncoder(call.streamSid)
      call.carrier.deliver(encoder.connected())
      call.carrier.deliver(
        encoder.start(0, { accountSid: "AC" + "0".repeat(32), callSid: call.callSid, customParameters: { token } })
      )
    }
    // Let every session open and connect its agent.
    yield* advance(1)
  }
  let sent = 0
  const ticks = Math.round((SECONDS * 1000) / FRAME_MS)
  let steadyFromUs = 0
  let steadyCpu = process.cpuUsage()
  for (let tick = 0; tick < ticks; tick++) {
    // After 2 s of warm-up: the window a --cpu-prof reading counts (bench/cpuProfile.ts).
    if (tick === 100) {
      steadyFromUs = nowUs()
      steadyCpu = process.cpuUsage()
    }
    virtualMs += FRAME_MS
    for (const call of calls) {
      const caller = call.callerFrame()
      const agent = call.agentFrame()
      sent += caller.length + agent.length
      if (DRIVER_ONLY) continue
      call.carrier.deliver(caller)
      call.agent.deliver(agent)
      if (MARK_ECHO) for (const echo of call.markEchoes()) call.carrier.deliver(echo)
    }
    if ((tick + 1) % TICKS_PER_ADVANCE === 0) yield* advance(TICKS_PER_ADVANCE)
  }
  const windowUs = [steadyFromUs, nowUs()]
  const windowCpu = process.cpuUsage(steadyCpu)
  const live = registry.liveCount()
  /** Observations of one of the process's histograms (all label sets: the bench has one environment). */
  const observations = (name: string) =>
    Effect.map(
      Effect.promise(() => metrics.registry.getSingleMetric(name)!.get()),
      (metric) => metric.values.find((v) => (v as { metricName?: string }).metricName === `${name}_count`)?.value ?? 0
    )
  const answeredTurns = yield* observations("callgate_agent_response_latency_seconds")
  const playedTurns = yield* observations("callgate_agent_response_played_latency_seconds")
  const recordingWrites = (yield* Effect.promise(() => metrics.registry.getSingleMetric("callgate_recording_writes_total")!.get())).values[0]?.value ?? 0
  const fibers = COUNT_FIBERS ? (yield* supervisor.value).length - fibersBefore : Number.NaN
  ;(globalThis as { gc?: () => void }).gc?.()
  const memoryAfter = process.memoryUsage()
  const heapExt = memoryAfter.heapUsed + memoryAfter.external - (memoryBefore.heapUsed + memoryBefore.external)
  const toCarrier = calls.reduce((n, call) => n + call.carrier.messages, 0)
  const toAgent = calls.reduce((n, call) => n + call.agent.messages, 0)
  process.stdout.write(
    JSON.stringify({
      calls: CALLS,
      seconds: SECONDS,
      timeoutSeconds: TIMEOUT_SECONDS,
      recording: RECORDING,
      recordingWrites,
      driverOnly: DRIVER_ONLY,
      liveSessions: live,
      answeredTurns,
      playedTurns,
      messagesToCarrier: toCarrier,
      messagesToAgent: toAgent,
      charsIn: sent,
      fibersPerCall: fibers / CALLS,
      heapExtBytesPerCall: Math.round(heapExt / CALLS),
      // This process's CPU time (all threads) over the steady window, per call-second: a figure of the host, not deterministic.
      cpuMsPerCallSecond: Number(((windowCpu.user + windowCpu.system) / 1000 / CALLS / ((ticks - 100) * FRAME_MS / 1000)).toFixed(4)),
      windowUs
    }) + "\n"
  )
  for (const call of calls) call.carrier.deliver(`{"event":"stop","sequenceNumber":"9","stop":{"accountSid":"AC","callSid":"${call.callSid}"},"streamSid":"${call.streamSid}"}`)
  yield* advance(1)
  if (DRIVER_ONLY) return
  // What an ended call leaves behind: its stored record (the embedded store keeps it for the
  // retention) and anything else still holding on to it, after the endings have run.
  for (let round = 0; round < 20 && registry.liveCount() > 0; round++) yield* advance(TICKS_PER_ADVANCE)
  // The driver lets go of its fake sockets, as the kernel would of closed ones.
  calls.length = 0
  ;(globalThis as { gc?: () => void }).gc?.()
  const memoryEnded = process.memoryUsage()
  if (process.env.CALLCOST_SNAPSHOT) (yield* Effect.promise(() => import("node:v8"))).writeHeapSnapshot(process.env.CALLCOST_SNAPSHOT)
  const ended = memoryEnded.heapUsed + memoryEnded.external - (memoryBefore.heapUsed + memoryBefore.external)
  process.stdout.write(JSON.stringify({ liveSessionsAfterHangUp: registry.liveCount(), heapExtBytesPerEndedCall: Math.round(ended / CALLS) }) + "\n")
})

const config = ConfigProvider.fromMap(
  new Map([
    ["ADMIN_API_KEY", "bench-admin-key-0123456789"],
    ["LOG_LEVEL", "none"],
    ["RATE_LIMIT_PER_MINUTE", "0"],
    ...(RECORDINGS_DIR !== undefined ? [["RECORDINGS_DIR", RECORDINGS_DIR] as const] : [])
  ])
)

await Effect.runPromise(
  Effect.scoped(program.pipe(Effect.provide(appServicesLayer))).pipe(
    COUNT_FIBERS ? Effect.supervised(supervisor) : (effect) => effect,
    Effect.provide(Layer.setConfigProvider(config)),
    Effect.provide(TestContext.TestContext)
  )
)
if (RECORDINGS_DIR !== undefined) rmSync(RECORDINGS_DIR, { recursive: true, force: true })
process.exit(0)
