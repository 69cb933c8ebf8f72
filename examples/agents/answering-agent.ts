/**
 * An example voice agent that answers every caller turn with audio. It speaks callgate's agent
 * dialect (Twilio Media Streams + hangup/transfer/error), dial-in (keeps `capacity` sockets open
 * to /connect, reopening each after its call) or dial-out (a WebSocket server callgate calls).
 *
 *   npx tsx examples/agents/answering-agent.ts --gateway http://127.0.0.1:8080 \
 *     --agent agent_1 --environment env_1 --key $CALLGATE_API_KEY --capacity 4
 *
 * See docs/simulator.md for every option.
 */
import { existsSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { readUlawFile } from "../../sim/AudioSource.js"
import { durationMs } from "../../sim/Mulaw.js"
import {
  AgentHost,
  type AgentConnectionOptions,
  type ConnectRefusal,
  connectionFlags,
  describeStart,
  isMain,
  optionalNumber,
  readFlags,
  reportConnection,
  stopOnSignal
} from "./agent-host.js"
import type { AgentCall, CallStart } from "./agent-runtime.js"
import { EnergyTurnDetector, type TurnDetectorOptions } from "./energy-turn-detector.js"

/** The default reply, beside this file (run with tsx) or in the source tree (run from dist/). */
export const DEFAULT_REPLY_PATH = [
  new URL("./audio/agent-greeting.ulaw", import.meta.url),
  new URL("../../../examples/agents/audio/agent-greeting.ulaw", import.meta.url)
]
  .map((url) => fileURLToPath(url))
  .find((path) => existsSync(path))!

export interface AnsweringAgentOptions extends AgentConnectionOptions {
  /** What the agent says each turn (mu-law); default examples/agents/audio/agent-greeting.ulaw. */
  readonly reply?: Buffer
  /** Thinking time between the end of the caller's turn and the first reply frame. Default 200 ms. */
  readonly responseLatencyMs?: number
  readonly turnDetector?: TurnDetectorOptions
  /** A DTMF digit ends the caller's turn (it is caller input). Default true. */
  readonly answerDtmf?: boolean
  /** Answers this many turns per call, then never again (the call stalls). */
  readonly stallAfterTurns?: number
  /** Sends `hangup` once this many turns are answered and the last reply has played (0: at start). */
  readonly hangupAfterTurns?: number
  /** Sends `transfer` to `transferTo` once this many turns are answered (0: at start). */
  readonly transferAfterTurns?: number
  readonly transferTo?: string
  /** Sends `error` once this many turns are answered (0: at start). */
  readonly errorAfterTurns?: number
  readonly errorMessage?: string
}

export interface AgentTurnEvent {
  readonly call: CallStart
  /** Caller turns heard in this call so far, this one included. */
  readonly turn: number
}

export interface AnsweringAgentEvents {
  call: [CallStart]
  turn: [AgentTurnEvent]
  /** The first frame of the reply to `turn` went out (`atUs`: FrameStamp's nowUs clock). */
  audioSent: [AgentTurnEvent & { readonly atUs: number }]
  reply: [AgentTurnEvent & { readonly frames: number; readonly mark: string }]
  stalled: [AgentTurnEvent]
  action: [{ readonly call: CallStart; readonly kind: "hangup" | "transfer" | "error" }]
  mark: [{ readonly call: CallStart; readonly name: string }]
  dtmf: [{ readonly call: CallStart; readonly digit: string }]
  callEnded: [{ readonly call: CallStart | undefined; readonly code: number; readonly reason: string; readonly turns: number; readonly replies: number }]
  /** Every caller media frame (for stamp reading); `atUs` is the nowUs() receive time. */
  callerMedia: [Buffer, number, AgentCall]
  connectError: [string]
  /** callgate refused the connection for good (401, 403, 404): the agent has stopped. */
  fatal: [ConnectRefusal]
  protocolError: [string]
}

export class AnsweringAgent extends AgentHost<AnsweringAgentEvents> {
  readonly stats = { calls: 0, turns: 0, replies: 0, stalls: 0, callsEnded: 0 }
  private readonly reply: Buffer

  constructor(private readonly options: AnsweringAgentOptions) {
    super()
    this.reply = options.reply ?? readUlawFile(DEFAULT_REPLY_PATH)
  }

  start(): Promise<this> {
    return this.listen(this.options, (call) => this.handle(call)).then(() => this)
  }

  private handle(call: AgentCall) {
    const o = this.options
    const detector = new EnergyTurnDetector(o.turnDetector)
    let heard = 0
    let answered = 0
    let responding = false
    let info: CallStart | undefined
    // Audio that stops arriving mid-turn also ends the turn (a carrier that stops sending silence).
    let idle: NodeJS.Timeout | undefined
    const onIdle = () => {
      idle = undefined
      if (!responding && detector.flush()) void onTurnEnd()
    }
    const armIdle = () => (idle ? idle.refresh() : (idle = setTimeout(onIdle, o.turnDetector?.endSilenceMs ?? 700)))
    const disarmIdle = () => {
      if (idle) clearTimeout(idle)
      idle = undefined
    }

    const markWaiters = new Map<string, () => void>()
    const waitForMark = (name: string, timeoutMs: number) =>
      new Promise<void>((done) => {
        const timer = setTimeout(done, timeoutMs)
        markWaiters.set(name, () => {
          clearTimeout(timer)
          done()
        })
      })

    const afterAnswered = async (n: number) => {
      if (!info || !call.isOpen) return
      const due = (k: number | undefined) => k !== undefined && k === n
      if (!due(o.hangupAfterTurns) && !due(o.transferAfterTurns) && !due(o.errorAfterTurns)) return
      if (n > 0) await waitForMark(`reply-${n}`, durationMs(this.reply) + 3000)
      if (!call.isOpen) return
      if (due(o.errorAfterTurns)) {
        call.error(o.errorMessage ?? "the example agent failed on purpose")
        this.emit("action", { call: info, kind: "error" })
      } else if (due(o.transferAfterTurns)) {
        call.transfer(o.transferTo ?? "+15550100999")
        this.emit("action", { call: info, kind: "transfer" })
      } else {
        call.hangup()
        this.emit("action", { call: info, kind: "hangup" })
      }
    }

    const onTurnEnd = async () => {
      if (!info) return
      heard++
      this.stats.turns++
      this.emit("turn", { call: info, turn: heard })
      if (o.stallAfterTurns !== undefined && answered >= o.stallAfterTurns) {
        this.stats.stalls++
        this.emit("stalled", { call: info, turn: heard })
        return
      }
      responding = true
      const turn = heard
      await new Promise((done) => setTimeout(done, o.responseLatencyMs ?? 200))
      if (!call.isOpen) return
      const n = ++answered
      const started = info
      call.once("audioSent", (atUs) => this.emit("audioSent", { call: started, turn, atUs }))
      const sent = call.sendAudio(this.reply)
      this.stats.replies++
      if (!(await sent)) return
      const mark = `reply-${n}`
      call.sendMark(mark)
      this.emit("reply", { call: info, turn, frames: Math.ceil(this.reply.length / 160), mark })
      detector.reset()
      responding = false
      await afterAnswered(n)
    }

    call.on("start", (start) => {
      info = start
      this.stats.calls++
      this.emit("call", start)
      void afterAnswered(0)
    })
    call.on("media", (audio, atUs) => {
      this.emit("callerMedia", audio, atUs, call)
      if (responding || !info) return
      if (detector.push(audio)) {
        disarmIdle()
        void onTurnEnd()
      } else if (detector.inSpeech) {
        armIdle()
      }
    })
    call.on("dtmf", (digit) => {
      if (info) this.emit("dtmf", { call: info, digit })
      if ((o.answerDtmf ?? true) && !responding) {
        detector.reset()
        disarmIdle()
        void onTurnEnd()
      }
    })
    call.on("mark", (name) => {
      if (info) this.emit("mark", { call: info, name })
      markWaiters.get(name)?.()
      markWaiters.delete(name)
    })
    call.on("protocolError", (message) => this.emit("protocolError", message))
    call.on("closed", ({ code, reason }) => {
      disarmIdle()
      for (const release of markWaiters.values()) release()
      if (!info) return // an idle dial-in socket closed: no call ended
      this.stats.callsEnded++
      this.emit("callEnded", { call: info, code, reason, turns: heard, replies: answered })
    })
  }
}

/** Starts an answering agent; resolves once it is listening or its sockets are opening. */
export const startAnsweringAgent = (options: AnsweringAgentOptions): Promise<AnsweringAgent> => new AnsweringAgent(options).start()

const ANSWERING_USAGE = `Usage: answering-agent.ts (--agent ID --environment ID [--gateway URL] --key KEY | --url WS_URL | --dial-out PORT)

  --capacity N          dial-in sockets kept open (default 1)
  --reply FILE          raw mu-law reply (default examples/agents/audio/agent-greeting.ulaw)
  --latency MS          wait between the caller's turn ending and the reply (default 200)
  --end-silence MS      silence that ends a caller turn (default 700)
  --stall-after K       answer K turns per call, then never again
  --hangup-after K      send hangup after answering K turns (0: at once)
  --transfer-after K    send transfer after answering K turns; --transfer-to +E164
  --error-after K       send error after answering K turns
  --dial-out PORT       serve dial-out connections on PORT instead (--host, --tls-cert, --tls-key)
  --key KEY             API key (default CALLGATE_API_KEY)`

if (isMain(import.meta.url)) {
  const flags = readFlags(process.argv.slice(2))
  if (flags.has("help")) {
    process.stdout.write(`${ANSWERING_USAGE}\n`)
    process.exit(0)
  }
  const log = (message: string) => process.stdout.write(`${new Date().toISOString()} ${message}\n`)
  try {
    const agent = await startAnsweringAgent({
      ...connectionFlags(flags),
      reply: flags.has("reply") ? readUlawFile(flags.get("reply")!) : undefined,
      responseLatencyMs: optionalNumber(flags, "latency"),
      turnDetector: { endSilenceMs: optionalNumber(flags, "end-silence") },
      stallAfterTurns: optionalNumber(flags, "stall-after"),
      hangupAfterTurns: optionalNumber(flags, "hangup-after"),
      transferAfterTurns: optionalNumber(flags, "transfer-after"),
      transferTo: flags.get("transfer-to"),
      errorAfterTurns: optionalNumber(flags, "error-after")
    })
    agent.on("call", (c) => log(`call ${describeStart(c)}`))
    agent.on("turn", ({ turn }) => log(`caller turn ${turn} ended`))
    agent.on("reply", ({ turn, frames, mark }) => log(`replied to turn ${turn}: ${frames} frames, then mark ${mark}`))
    agent.on("stalled", ({ turn }) => log(`turn ${turn}: not answering (stalled)`))
    agent.on("action", ({ kind }) => log(`sent ${kind}`))
    agent.on("mark", ({ name }) => log(`mark ${name} played`))
    agent.on("dtmf", ({ digit }) => log(`DTMF ${digit}`))
    agent.on("callEnded", ({ code, turns, replies }) => log(`call ended (close ${code}) after ${turns} turns, ${replies} replies`))
    reportConnection(agent, "answering-agent", log)
    agent.on("protocolError", (message) => log(`protocol: ${message}`))
    log(agent.server ? `dial-out agent listening on ${agent.server.url}` : `dial-in agent keeping ${flags.get("capacity") ?? 1} socket(s) open`)
    stopOnSignal(() => agent.close())
  } catch (error) {
    process.stderr.write(`answering-agent: ${(error as Error).message}\n\n${ANSWERING_USAGE}\n`)
    process.exit(2)
  }
}
