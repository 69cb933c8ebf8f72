import { Either } from "effect"
import { agentMediaFormat } from "../kernel/AudioFormat.js"
import type { AgentEvents, AgentLink, AgentResume, AgentStart, MachineVerdict } from "../kernel/CallLegs.js"
import { makeFrameDecoder, parseJson } from "../frames/FrameDecoding.js"
import { accountSidOf } from "../kernel/TwilioIds.js"
import { CloseCode, type WireListener, type WireSocket } from "../frames/WireSocket.js"
import { twilioInboundEncoder } from "../frames/TwilioFrames.js"
import {
  AGENT_MESSAGE_EVENTS,
  AgentMessage,
  agentMediaScanner,
  callgateErrorFrame,
  checkpointIn,
  isAgentMarkMessage,
  isAgentMediaFrame,
  isCheckpointEvent,
  isRecordingEvent,
  recordingPausedOf
} from "../frames/AgentDialect.js"

const isMedia = isAgentMediaFrame
const scanner = agentMediaScanner
const scanned = scanner.result
const decodeMessage = makeFrameDecoder("agent", AgentMessage, AGENT_MESSAGE_EVENTS)

type Encoder = ReturnType<typeof twilioInboundEncoder>

let nextId = 0

/**
 * One agent WebSocket, dial-in or dial-out, speaking the agent dialect. It starts idle (messages
 * ignored) and serves exactly one call: `begin` binds it, `finish` sends `stop` and closes it, and
 * it is never bound again.
 */
export class AgentConnection implements WireListener, AgentLink {
  readonly id = ++nextId
  private state: "idle" | "bound" | "done" = "idle"
  private events: AgentEvents | undefined
  private encoder: Encoder | undefined
  private sequence = 0
  private chunk = 0
  private stopFields = { accountSid: "", callSid: "" }
  private streamSid = ""
  /** Called once if the socket goes away while idle (the pool forgets it). */
  onIdleClose: (() => void) | undefined

  constructor(private readonly socket: WireSocket) {
    socket.listen(this)
  }

  get isIdle(): boolean {
    return this.state === "idle" && this.socket.isOpen
  }

  /** Liveness ping (see WireSocket.heartbeat); false once the socket is gone. */
  heartbeat(): boolean {
    return this.socket.heartbeat()
  }

  begin(start: AgentStart, events: AgentEvents): void {
    if (this.state !== "idle" || !this.socket.isOpen) {
      // Gone between being handed out and the call starting (or, by mistake, offered twice).
      this.state = "done"
      return events.agentFailed({ kind: "agent_disconnected", message: "The agent connection closed before the call began." })
    }
    this.state = "bound"
    this.events = events
    this.encoder = twilioInboundEncoder(start.streamSid)
    this.streamSid = start.streamSid
    // The ids a Twilio-stream bot hands back to Twilio's REST API: callgate serves that API for them.
    this.stopFields = { accountSid: accountSidOf(start.agentId), callSid: start.sessionId }
    this.socket.send(this.encoder.connected())
    this.socket.send(
      this.encoder.start(++this.sequence, {
        ...this.stopFields,
        ...(start.mediaFormat !== undefined ? { mediaFormat: agentMediaFormat(start.mediaFormat) } : {}),
        customParameters: {
          // The entry URL's parameters and the placer's metadata first: callgate's own parameters cannot be overridden by them.
          ...start.customParameters,
          ...start.metadata,
          sessionId: start.sessionId,
          agentId: start.agentId,
          environmentId: start.environmentId,
          from: start.from,
          to: start.to,
          // The names Pipecat's telephony runner reads.
          from_number: start.from,
          to_number: start.to,
          direction: start.direction,
          provider: start.provider,
          ...(start.answeredBy !== undefined ? { answeredBy: start.answeredBy } : {}),
          ...(start.traceparent !== undefined ? { traceparent: start.traceparent } : {}),
          ...(start.failover !== undefined ? { resumed: "true", failover: String(start.failover) } : start.returned === true ? { resumed: "true" } : {})
        }
      })
    )
  }

  onText(text: string): void {
    const events = this.events
    if (this.state !== "bound" || events === undefined) return
    // The hot path: a media frame written exactly as Twilio-stream bots write it (MediaScanner.ts).
    if (scanner.scan(text)) return events.agentMedia(scanned.payload(text))
    const raw = parseJson(text)
    if (isMedia(raw)) return events.agentMedia(raw.media.payload)
    if (isAgentMarkMessage(raw)) return events.agentMark(raw.mark.name)
    if (isRecordingEvent(raw)) return this.recording(raw, events)
    if (isCheckpointEvent(raw)) return this.checkpoint(raw, events)
    const decoded = decodeMessage(raw)
    if (Either.isLeft(decoded)) {
      this.state = "done"
      this.socket.close(decoded.left.code, decoded.left.reason)
      return events.agentFailed({ kind: "agent_protocol_error", message: `The agent sent an invalid message: ${decoded.left.reason}` })
    }
    const message = decoded.right
    switch (message.event) {
      case "media":
        return events.agentMedia(message.media.payload)
      case "mark":
        return events.agentMark(message.mark.name)
      case "clear":
        return events.agentClear()
      case "hangup":
        return events.agentHangup()
      case "transfer":
        return events.agentTransfer(message.transfer.to)
      case "error":
        return events.agentFailed({ kind: "agent_error", message: `The agent reported an error: ${message.error.message}` })
    }
  }

  /** Pause or resume the recording; a malformed request gets `error` back and the call goes on. */
  private recording(raw: unknown, events: AgentEvents) {
    const paused = recordingPausedOf(raw)
    if (typeof paused === "string") return this.socket.send(callgateErrorFrame(paused))
    events.agentRecording?.(paused)
  }

  /** Keeps the agent's checkpoint; one not an object or too large gets `error` back and the call goes on. */
  private checkpoint(raw: unknown, events: AgentEvents) {
    const checkpoint = checkpointIn(raw)
    if (typeof checkpoint === "string") return this.socket.send(callgateErrorFrame(checkpoint))
    events.agentCheckpoint?.(checkpoint)
  }

  onClose(code: number, _reason: string, fault: string | undefined): void {
    const previous = this.state
    const events = this.events
    this.state = "done"
    this.events = undefined
    if (previous === "idle") return this.onIdleClose?.()
    if (previous !== "bound") return
    // A close handshake with 1000 is the agent ending the call on purpose, as a Twilio
    // <Connect><Stream> server does; any other code, or a socket that broke, is a failure.
    if (code === CloseCode.normal && fault === undefined) return events?.agentClosed()
    events?.agentFailed({
      kind: "agent_disconnected",
      message: fault !== undefined ? `The agent connection failed: ${fault}` : `The agent closed its connection during the call (code ${code})`
    })
  }

  sendMedia(payload: string, timestampMs: number): void {
    const encoder = this.encoder
    if (encoder === undefined) return
    const frame = encoder.media(++this.sequence, ++this.chunk, timestampMs, payload)
    if (encoder.mediaIsAscii) this.socket.sendAscii(frame)
    else this.socket.send(frame)
  }

  sendDtmf(digit: string): void {
    if (this.encoder !== undefined) this.socket.send(this.encoder.dtmf(++this.sequence, digit))
  }

  sendMark(name: string): void {
    if (this.encoder !== undefined) this.socket.send(this.encoder.mark(++this.sequence, name))
  }

  sendAmd(verdict: MachineVerdict): void {
    if (this.encoder === undefined || this.state !== "bound") return
    this.socket.send(
      JSON.stringify({ event: "amd", sequenceNumber: String(++this.sequence), streamSid: this.streamSid, amd: { answeredBy: verdict.answeredBy, detail: verdict.detail } })
    )
  }

  sendResume(resume: AgentResume): void {
    if (this.encoder === undefined || this.state !== "bound") return
    this.socket.send(JSON.stringify({ event: "resume", sequenceNumber: String(++this.sequence), streamSid: this.streamSid, resume }))
  }

  finish(code: number, reason: string): void {
    if (this.state === "bound" && this.encoder !== undefined) this.socket.send(this.encoder.stop(++this.sequence, this.stopFields))
    this.state = "done"
    // The pool pings its connections until it sees them closed (AgentPool's heartbeat): a finished
    // one must not keep its call (the call owner, its turn watch, its detectors) alive meanwhile.
    this.events = undefined
    this.socket.close(code, reason)
  }

  get backlog(): number {
    return this.socket.bufferedAmount
  }
}
