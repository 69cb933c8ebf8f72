/**
 * The agent side of the load, as its own process: dial-in agent sockets (examples/agents'
 * DialInPool and AgentCall, callgate's agent dialect) that answer every caller turn. Unlike the
 * example answering agent, a bench agent sends one stamped 160-byte frame every 20 ms for the
 * whole call, the reply while answering and silence otherwise, so media flows at real cadence in
 * both directions, as it does from a real voice agent's TTS stream.
 *
 * Turn ends are found with the example agents' energy detector (700 ms of silence after speech);
 * the reply (examples/agents/audio/agent-greeting.ulaw) starts 200 ms later and ends with a mark.
 *
 * Against callgate the pool dials /v1/agents/{agentId}/environments/{environmentId}/connect with a
 * bearer key; against the bare relay each call's agent dials /agent/<call>. Driven over IPC by
 * relayLoad.ts: setup, grow, record, windowOpen, windowClose, settle, stop. Sockets are reopened
 * after each call (DialInPool), so capacity outlives the calls of a step.
 */
import { agentConnectUrl, DialInPool } from "../examples/agents/agent-host.js"
import type { AgentCall } from "../examples/agents/agent-runtime.js"
import { DEFAULT_REPLY_PATH } from "../examples/agents/answering-agent.js"
import { EnergyTurnDetector } from "../examples/agents/energy-turn-detector.js"
import { readUlawFile } from "../sim/AudioSource.js"
import { nowUs, writeStamp } from "../sim/FrameStamp.js"
import { FramePacer } from "../sim/FramePacer.js"
import { FRAME_BYTES, MULAW_SILENCE } from "../sim/Mulaw.js"
import { simAudioCodec, type SimStreamCodec } from "../sim/StreamCodec.js"
import { serveWorker, sleep } from "./benchProcess.js"
import { ReceiveLedger, SendLedger } from "./frameLedger.js"
import { LoadWindow } from "./loadStats.js"

export type AgentTarget =
  | { readonly mode: "relay"; readonly relayUrl: string }
  | {
      readonly mode: "gateway"
      readonly gatewayUrl: string
      readonly agentId: string
      readonly environmentId: string
      readonly apiKey: string
      /** The carrier's codec, which the agents receive and speak (the formats part); default 8 kHz mu-law. */
      readonly codec?: SimStreamCodec
    }

const RESPONSE_LATENCY_MS = 200

let target: AgentTarget | undefined
const reply = readUlawFile(DEFAULT_REPLY_PATH)
const silenceFrame = Buffer.alloc(FRAME_BYTES, MULAW_SILENCE)
const pools: Array<DialInPool> = []
/** Every call's stream id and the last sequence number it stamped; kept after the call ends. */
const streams = new Map<number, { seq: number }>()
let streamCount = 0
let relaySockets = 0
let gatewaySockets = 0
const counters = { calls: 0, turns: 0, replies: 0, callsEnded: 0 }
let windowCounters = { ...counters }
const ledger = new ReceiveLedger()
const sent = new SendLedger(function* () {
  for (const [id, stream] of streams) yield [id, stream.seq] as const
})
const load = new LoadWindow()

/** One call: a frame every 20 ms (reply audio or silence), answering each caller turn. */
const serveCall = (call: AgentCall) => {
  // The agent's audio is 8 kHz mu-law, stamped, converted to the call's codec as it is sent and back as it arrives.
  const codec = target?.mode === "gateway" && target.codec !== undefined && target.codec !== "PCMU" ? simAudioCodec(target.codec) : undefined
  const detector = new EnergyTurnDetector()
  const scratch = Buffer.alloc(FRAME_BYTES)
  const stream = { seq: 0 }
  let id = 0
  let prefix = ""
  let replyOffset = -1
  let replies = 0
  let replyTimer: NodeJS.Timeout | undefined

  const pacer = new FramePacer(() => {
    if (!call.isOpen) return pacer.stop()
    const replying = replyOffset >= 0
    const frame = replying ? reply.subarray(replyOffset, replyOffset + FRAME_BYTES) : silenceFrame
    frame.copy(scratch)
    writeStamp(scratch, id, ++stream.seq, nowUs())
    call.socket.send(`${prefix}${(codec !== undefined ? codec.encode(scratch) : scratch).toString("base64")}"}}`)
    if (replying) {
      replyOffset += FRAME_BYTES
      if (replyOffset >= reply.length) {
        replyOffset = -1
        call.sendMark(`reply-${replies}`)
        detector.reset()
      }
    }
  })

  call.on("start", (start) => {
    id = ++streamCount
    streams.set(id, stream)
    counters.calls++
    prefix = `{"event":"media","streamSid":${JSON.stringify(start.streamSid)},"media":{"payload":"`
    pacer.start()
  })
  call.on("media", (received, atUs) => {
    const audio = codec !== undefined ? codec.decode(received) : received
    ledger.receive(audio, atUs)
    if (replyOffset >= 0 || replyTimer !== undefined) return
    if (detector.push(audio)) {
      counters.turns++
      replyTimer = setTimeout(() => {
        replyTimer = undefined
        replies++
        counters.replies++
        replyOffset = 0
      }, RESPONSE_LATENCY_MS)
    }
  })
  call.on("closed", () => {
    pacer.stop()
    if (replyTimer !== undefined) clearTimeout(replyTimer)
    if (id !== 0) counters.callsEnded++
  })
}

let lastConnectError: string | undefined

const addPool = (url: string, capacity: number, apiKey?: string) => {
  const pool = new DialInPool({ url, capacity, apiKey, reconnectDelayMs: 100 })
  pool.on("call", serveCall)
  pool.on("connectError", (message) => (lastConnectError = message))
  pools.push(pool.start())
  return pool
}

const idleSockets = () => pools.reduce((sum, pool) => sum + pool.idleSockets, 0)

/**
 * Makes sure `to` agent sockets exist (callgate: dial-in sockets; relay: one per call index) and
 * that all of them are open and idle (sockets of the previous step's calls are being reopened).
 */
const grow = async ({ to }: { to: number }) => {
  if (target === undefined) throw new Error("setup first")
  if (target.mode === "gateway" && to > gatewaySockets) {
    addPool(agentConnectUrl(target.gatewayUrl, target.agentId, target.environmentId), to - gatewaySockets, target.apiKey)
    gatewaySockets = to
  }
  if (target.mode === "relay") while (relaySockets < to) addPool(`${target.relayUrl}/agent/${++relaySockets}`, 1)
  const have = target.mode === "gateway" ? gatewaySockets : relaySockets
  const deadline = performance.now() + 60_000
  while (idleSockets() < have) {
    if (performance.now() > deadline) {
      throw new Error(`only ${idleSockets()} of ${have} agent sockets idle after 60 s; last connect error: ${lastConnectError ?? "none"}`)
    }
    await sleep(50)
  }
  return { sockets: have }
}

serveWorker({
  setup: (body: { target: AgentTarget }) => {
    target = body.target
  },
  grow,
  record: () => ledger.record(),
  windowOpen: () => {
    sent.open()
    load.open()
    windowCounters = { ...counters }
  },
  windowClose: () => ({
    ranges: sent.close(),
    load: load.close(),
    turns: counters.turns - windowCounters.turns,
    replies: counters.replies - windowCounters.replies,
    callsEnded: counters.callsEnded - windowCounters.callsEnded
  }),
  settle: (body: { ranges: ReturnType<SendLedger["close"]> }) => ledger.settle(body.ranges),
  stop: async () => {
    await Promise.all(pools.map((pool) => pool.close()))
  }
})
