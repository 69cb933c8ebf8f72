/**
 * A minimal agent that survives its own replacement (docs/calls.md, "Checkpoints"): it collects the
 * digits the caller types and, after each one, checkpoints `{"digits":"..."}`. callgate keeps the
 * latest checkpoint with the session; when this agent's connection fails mid-call and another agent
 * takes the call over, that agent receives `resume` with the checkpoint and goes on from the digits
 * already typed instead of asking again.
 *
 *   npx tsx examples/agents/checkpoint-agent.ts --gateway http://127.0.0.1:8080 \
 *     --agent agent_1 --environment env_1 --key $CALLGATE_API_KEY --capacity 2
 */
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

export interface CheckpointAgentEvents {
  call: [CallStart]
  /** A checkpoint went out: the digits so far. */
  checkpointed: [{ readonly call: CallStart; readonly digits: string }]
  /** The call was taken over from another agent: the digits its checkpoint held (empty when it had none). */
  resumed: [{ readonly call: CallStart; readonly digits: string; readonly previousEndReason: string }]
  /** callgate refused a message (an oversized checkpoint, say); the call went on. */
  refused: [string]
  callEnded: [{ readonly call: CallStart | undefined; readonly code: number; readonly digits: string }]
  connectError: [string]
  fatal: [ConnectRefusal]
  protocolError: [string]
}

/** The digits a checkpoint holds, when it is one of this agent's. */
export const digitsOf = (checkpoint: Record<string, unknown> | null): string =>
  typeof checkpoint?.["digits"] === "string" ? checkpoint["digits"] : ""

export class CheckpointAgent extends AgentHost<CheckpointAgentEvents> {
  constructor(private readonly options: AgentConnectionOptions = {}) {
    super()
  }

  start(): Promise<this> {
    return this.listen(this.options, (call) => this.handle(call)).then(() => this)
  }

  private handle(call: AgentCall) {
    let info: CallStart | undefined
    let digits = ""
    call.on("start", (start) => {
      info = start
      this.emit("call", start)
    })
    // Sent right after `start` to an agent taking the call over: go on from the checkpoint.
    call.on("resume", (resume) => {
      digits = digitsOf(resume.checkpoint)
      if (info !== undefined) this.emit("resumed", { call: info, digits, previousEndReason: resume.previousEndReason })
    })
    call.on("dtmf", (digit) => {
      digits += digit
      call.checkpoint({ digits })
      if (info !== undefined) this.emit("checkpointed", { call: info, digits })
    })
    call.on("refused", (message) => this.emit("refused", message))
    call.on("protocolError", (message) => this.emit("protocolError", message))
    call.on("closed", ({ code }) => this.emit("callEnded", { call: info, code, digits }))
  }
}

export const startCheckpointAgent = (options: AgentConnectionOptions = {}): Promise<CheckpointAgent> => new CheckpointAgent(options).start()

if (isMain(import.meta.url)) {
  const flags = readFlags(process.argv.slice(2))
  if (flags.has("help")) {
    process.stdout.write(
      "Usage: checkpoint-agent.ts (--agent ID --environment ID [--gateway URL] --key KEY | --url WS_URL | --dial-out PORT) [--capacity N]\n"
    )
    process.exit(0)
  }
  const log = (message: string) => process.stdout.write(`${new Date().toISOString()} ${message}\n`)
  try {
    const agent = await startCheckpointAgent(connectionFlags(flags))
    agent.on("call", (c) => log(`call ${describeStart(c)}`))
    agent.on("checkpointed", ({ digits }) => log(`checkpoint: digits ${digits}`))
    agent.on("resumed", ({ digits, previousEndReason }) => log(`resumed after ${previousEndReason}: digits so far ${digits || "(none)"}`))
    agent.on("refused", (message) => log(`callgate refused a message: ${message}`))
    agent.on("callEnded", ({ code, digits }) => log(`call ended (close ${code}), digits ${digits || "(none)"}`))
    reportConnection(agent, "checkpoint-agent", log)
    log(agent.server ? `dial-out checkpoint agent listening on ${agent.server.url}` : `dial-in checkpoint agent keeping ${flags.get("capacity") ?? 1} socket(s) open`)
    stopOnSignal(() => agent.close())
  } catch (error) {
    process.stderr.write(`checkpoint-agent: ${(error as Error).message}\n`)
    process.exit(2)
  }
}
