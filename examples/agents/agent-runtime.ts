/**
 * One call as an example agent sees it, in callgate's agent dialect: Twilio Media Streams plus
 * the extensions `hangup`, `transfer`, `error` and `checkpoint`, and `resume` from callgate
 * (docs/calls.md, "Agents"). agent-host.ts brings the sockets; this file reads and writes their frames.
 */
import { EventEmitter } from "node:events"
import { type RawData, WebSocket } from "ws"
import { nowUs, writeStamp } from "../../sim/FrameStamp.js"
import { FramePacer } from "../../sim/FramePacer.js"
import { FRAME_BYTES, padToFrames } from "../../sim/Mulaw.js"

/** The `start` frame's content that matters to an agent. */
export interface CallStart {
  readonly streamSid: string
  readonly callSid: string
  /** The carrier account (Twilio `AC...`, Telnyx connection id): what the call-control API's URLs name. */
  readonly accountSid: string
  /** sessionId, agentId, environmentId, from, to, direction, provider (from callgate). */
  readonly customParameters: Readonly<Record<string, string>>
}

/** What callgate hands an agent taking a call over (docs/calls.md, "Checkpoints"): the session's latest checkpoint first. */
export interface CallResume {
  /** The last checkpoint an agent of this session sent; null when none did. */
  readonly checkpoint: Record<string, unknown> | null
  readonly turns: ReadonlyArray<unknown>
  readonly previousEndReason: string
  readonly heldAudioMs: number
}

export interface AgentCallEvents {
  start: [CallStart]
  /** After `start`, when this agent takes over a call another agent held. */
  resume: [CallResume]
  /** callgate refused a message of this agent (a bad checkpoint or recording request); the call goes on. */
  refused: [string]
  /** Caller audio, decoded; `atUs` is the receive time (FrameStamp's nowUs clock). */
  media: [Buffer, number]
  dtmf: [string]
  /** A mark this agent sent has been played to the caller (or cleared). */
  mark: [string]
  stop: []
  /** The first frame of audio given to `sendAudio` was written to the socket (`atUs`: nowUs clock). */
  audioSent: [number]
  /** The socket is closed; the call is over for this agent. */
  closed: [{ readonly code: number; readonly reason: string }]
  /** A frame this agent could not read. */
  protocolError: [string]
}

/**
 * One call as an agent sees it. Audio goes out at real cadence (one 160-byte frame every 20 ms,
 * on a drift-free clock) from a queue, so a reply can be queued whole.
 */
export class AgentCall extends EventEmitter<AgentCallEvents> {
  started: CallStart | undefined
  private readonly pacer = new FramePacer(() => this.sendNextFrame())
  private readonly queue: Array<{ readonly audio: Buffer; offset: number; readonly done: (completed: boolean) => void }> = []
  private readonly scratch = Buffer.alloc(FRAME_BYTES)
  private sequence = 0
  private closed = false

  constructor(
    readonly socket: WebSocket,
    private readonly options: { readonly stampCallId?: number } = {}
  ) {
    super()
    socket.on("message", this.receive)
    socket.on("close", (code, reason) => {
      this.closed = true
      this.stopAudio()
      this.emit("closed", { code, reason: reason.toString() })
    })
    socket.on("error", (error) => this.emit("protocolError", `socket error: ${error.message}`))
  }

  get isOpen() {
    return !this.closed && this.socket.readyState === WebSocket.OPEN
  }

  /** Queues audio (mu-law) to stream to the caller; resolves when its last frame was sent. */
  sendAudio(audio: Buffer): Promise<boolean> {
    if (!this.isOpen) return Promise.resolve(false)
    return new Promise((done) => {
      this.queue.push({ audio: padToFrames(audio), offset: 0, done })
      this.pacer.start()
    })
  }

  sendMark(name: string) {
    this.send({ event: "mark", streamSid: this.started?.streamSid, mark: { name } })
  }

  /** Drops audio not yet sent here and asks callgate to drop what the carrier has queued. */
  clear() {
    this.stopAudio()
    this.send({ event: "clear", streamSid: this.started?.streamSid })
  }

  hangup() {
    this.send({ event: "hangup" })
  }

  transfer(to: string) {
    this.send({ event: "transfer", transfer: { to } })
  }

  error(message: string) {
    this.send({ event: "error", error: { message } })
  }

  /** Keeps `state` with the session: the agent that takes the call over gets it in `resume`. At most 16 KiB serialized. */
  checkpoint(state: Record<string, unknown>) {
    this.send({ event: "checkpoint", checkpoint: state })
  }

  close(code = 1000, reason = "agent closed") {
    if (this.socket.readyState === WebSocket.OPEN || this.socket.readyState === WebSocket.CONNECTING) this.socket.close(code, reason)
  }

  private send(message: object) {
    if (this.isOpen) this.socket.send(JSON.stringify(message))
  }

  private stopAudio() {
    this.pacer.stop()
    for (const item of this.queue.splice(0)) item.done(false)
  }

  private sendNextFrame() {
    const item = this.queue[0]
    // Nothing queued when this frame fell due: the pacer stops. Audio queued before then (the next
    // loop of a stream, the next reply) goes on at the same cadence, never a frame early.
    if (item === undefined) return this.pacer.stop()
    if (!this.isOpen) return this.stopAudio()
    const first = item.offset === 0
    let frame = item.audio.subarray(item.offset, item.offset + FRAME_BYTES)
    item.offset += FRAME_BYTES
    if (this.options.stampCallId !== undefined) {
      frame.copy(this.scratch)
      writeStamp(this.scratch, this.options.stampCallId, ++this.sequence, nowUs())
      frame = this.scratch
    }
    const sid = this.started ? JSON.stringify(this.started.streamSid) : '""'
    this.socket.send(`{"event":"media","streamSid":${sid},"media":{"payload":"${frame.toString("base64")}"}}`)
    if (first) this.emit("audioSent", nowUs())
    if (item.offset >= item.audio.length) {
      this.queue.shift()
      item.done(true)
    }
  }

  private readonly receive = (data: RawData, isBinary: boolean) => {
    if (isBinary) return this.emit("protocolError", "binary frame")
    let message: any
    try {
      message = JSON.parse(data.toString())
    } catch {
      return this.emit("protocolError", "frame is not JSON")
    }
    switch (message?.event) {
      case "connected":
        return
      case "start": {
        const start = message.start ?? {}
        this.started = {
          streamSid: String(start.streamSid ?? message.streamSid ?? ""),
          callSid: String(start.callSid ?? ""),
          accountSid: String(start.accountSid ?? ""),
          customParameters: start.customParameters ?? {}
        }
        return this.emit("start", this.started)
      }
      case "media": {
        const payload = message.media?.payload
        if (typeof payload !== "string") return this.emit("protocolError", "media without payload")
        return this.emit("media", Buffer.from(payload, "base64"), nowUs())
      }
      case "dtmf":
        return this.emit("dtmf", String(message.dtmf?.digit ?? ""))
      case "mark":
        return this.emit("mark", String(message.mark?.name ?? ""))
      case "stop":
        return this.emit("stop")
      case "resume": {
        const resume = message.resume ?? {}
        return this.emit("resume", {
          checkpoint: typeof resume.checkpoint === "object" && resume.checkpoint !== null ? resume.checkpoint : null,
          turns: Array.isArray(resume.turns) ? resume.turns : [],
          previousEndReason: String(resume.previousEndReason ?? ""),
          heldAudioMs: Number(resume.heldAudioMs ?? 0)
        })
      }
      case "error":
        return this.emit("refused", String(message.error?.message ?? ""))
      default:
        return this.emit("protocolError", `unknown event ${JSON.stringify(message?.event)}`)
    }
  }
}
