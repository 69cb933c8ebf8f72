/**
 * An example agent that takes calls and never answers: the no-response case the circuit breaker
 * exists for. It can stay mute, or stream digital silence or low comfort noise from the start of
 * the call (neither is speech, so neither counts as the agent responding).
 *
 *   npx tsx examples/agents/silent-agent.ts --agent agent_1 --environment env_1 --key $KEY --stream noise
 */
import { comfortNoise, silence } from "../../sim/AudioSource.js"
import {
  AgentHost,
  type AgentConnectionOptions,
  type ConnectRefusal,
  connectionFlags,
  describeStart,
  isMain,
  readFlags,
  reportConnection,
  stopOnSignal
} from "./agent-host.js"
import type { AgentCall, CallStart } from "./agent-runtime.js"

export interface SilentAgentOptions extends AgentConnectionOptions {
  /** What flows to the caller: nothing (default), digital silence, or comfort noise (~-47 dBFS). */
  readonly stream?: "none" | "silence" | "noise"
}

export interface SilentAgentEvents {
  call: [CallStart]
  /** Caller media, for tests and stamp readers; `atUs` is the nowUs() receive time. */
  callerMedia: [Buffer, number, AgentCall]
  callEnded: [{ readonly call: CallStart; readonly code: number; readonly reason: string }]
  connectError: [string]
  /** callgate refused the connection for good (401, 403, 404): the agent has stopped. */
  fatal: [ConnectRefusal]
  protocolError: [string]
}

/** One second of what the agent streams, sent again and again while the call lasts. */
const LOOP_MS = 1000

export class SilentAgent extends AgentHost<SilentAgentEvents> {
  readonly stats = { calls: 0, callsEnded: 0, framesSent: 0 }
  private readonly loop: Buffer | undefined

  constructor(private readonly options: SilentAgentOptions = {}) {
    super()
    const kind = options.stream ?? "none"
    this.loop = kind === "silence" ? silence(LOOP_MS) : kind === "noise" ? comfortNoise(LOOP_MS, { rms: 120, seed: 11 }) : undefined
  }

  start(): Promise<this> {
    return this.listen(this.options, (call) => this.handle(call)).then(() => this)
  }

  private handle(call: AgentCall) {
    let info: CallStart | undefined
    const stream = async () => {
      while (this.loop && call.isOpen && (await call.sendAudio(this.loop))) this.stats.framesSent += this.loop.length / 160
    }
    call.on("start", (start) => {
      info = start
      this.stats.calls++
      this.emit("call", start)
      void stream()
    })
    call.on("media", (audio, atUs) => this.emit("callerMedia", audio, atUs, call))
    call.on("protocolError", (message) => this.emit("protocolError", message))
    call.on("closed", ({ code, reason }) => {
      if (!info) return
      this.stats.callsEnded++
      this.emit("callEnded", { call: info, code, reason })
    })
  }
}

export const startSilentAgent = (options: SilentAgentOptions = {}): Promise<SilentAgent> => new SilentAgent(options).start()

if (isMain(import.meta.url)) {
  const flags = readFlags(process.argv.slice(2))
  if (flags.has("help")) {
    process.stdout.write(
      "Usage: silent-agent.ts (--agent ID --environment ID [--gateway URL] --key KEY | --url WS_URL | --dial-out PORT)\n" +
        "  [--capacity N] [--stream none|silence|noise]\n"
    )
    process.exit(0)
  }
  const kind = flags.get("stream") ?? "none"
  if (kind !== "none" && kind !== "silence" && kind !== "noise") {
    process.stderr.write(`silent-agent: --stream must be none, silence or noise\n`)
    process.exit(2)
  }
  const log = (message: string) => process.stdout.write(`${new Date().toISOString()} ${message}\n`)
  try {
    const agent = await startSilentAgent({ ...connectionFlags(flags), stream: kind })
    agent.on("call", (c) => log(`call ${describeStart(c)}: staying silent (${kind})`))
    agent.on("callEnded", ({ code }) => log(`call ended (close ${code})`))
    reportConnection(agent, "silent-agent", log)
    log(agent.server ? `dial-out silent agent listening on ${agent.server.url}` : `dial-in silent agent keeping ${flags.get("capacity") ?? 1} socket(s) open`)
    stopOnSignal(() => agent.close())
  } catch (error) {
    process.stderr.write(`silent-agent: ${(error as Error).message}\n`)
    process.exit(2)
  }
}
