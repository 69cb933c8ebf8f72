import { Either, Option, Schema } from "effect"
import type { CallerEvents, CarrierLeg } from "../../session/CallLegs.js"
import { type FrameProblem, makeFrameDecoder, parseJson } from "../../session/FrameDecoding.js"
import { CloseCode, type WireListener, type WireSocket } from "../../session/WireSocket.js"
import type { StreamHost } from "./StreamHost.js"
import { isTwilioMediaFrame as isMedia, TWILIO_INBOUND_EVENTS, TwilioInbound, twilioOutboundEncoder } from "./TwilioFrames.js"

const decodeFrame = makeFrameDecoder("twilio", TwilioInbound, TWILIO_INBOUND_EVENTS)

type Encoder = ReturnType<typeof twilioOutboundEncoder>

/**
 * One Twilio media stream: authenticates it at `start` (the session token in customParameters,
 * bound to this CallSid), then turns its frames into CallerEvents and the session's requests into
 * Twilio frames. Anything malformed closes this socket, and only this one.
 */
export class TwilioStream implements WireListener, CarrierLeg {
  private state: "awaiting-start" | "open" | "done" = "awaiting-start"
  private events: CallerEvents | undefined
  private encoder: Encoder | undefined
  private streamSid = ""

  constructor(
    private readonly socket: WireSocket,
    private readonly host: StreamHost
  ) {}

  onText(text: string): void {
    if (this.state === "done") return
    const raw = parseJson(text)
    // The hot path: a media frame of a live stream, checked by a precompiled guard.
    if (this.events !== undefined && isMedia(raw)) {
      if (raw.streamSid !== undefined && raw.streamSid !== this.streamSid) {
        return this.fail({ code: CloseCode.protocolError, reason: "twilio: media frame for another streamSid" })
      }
      const track = raw.media.track
      if (track === undefined || track === "inbound" || track === "inbound_track") this.events.callerMedia(raw.media.payload)
      return
    }
    const decoded = decodeFrame(raw)
    if (Either.isLeft(decoded)) return this.fail(decoded.left)
    const frame = decoded.right
    switch (frame.event) {
      case "connected":
        return
      case "start":
        return this.start(frame)
      case "media":
        return this.fail({ code: CloseCode.protocolError, reason: "twilio: media frame before start" })
      case "dtmf":
        if (this.events === undefined) return this.fail({ code: CloseCode.protocolError, reason: "twilio: dtmf frame before start" })
        return this.events.callerDtmf(frame.dtmf.digit)
      case "mark":
        if (this.events === undefined) return this.fail({ code: CloseCode.protocolError, reason: "twilio: mark frame before start" })
        return this.events.carrierMark(frame.mark.name)
      case "stop": {
        const events = this.events
        this.state = "done"
        if (events === undefined) return this.socket.close(CloseCode.normal, "stream stopped before start")
        return events.carrierStopped()
      }
    }
  }

  onClose(_code: number, _reason: string, fault: string | undefined): void {
    if (this.state === "done") return
    this.state = "done"
    this.events?.carrierGone(fault === undefined ? undefined : { kind: "carrier_stream_error", message: `Twilio stream socket failed: ${fault}` })
  }

  private start(frame: Extract<TwilioInbound, { event: "start" }>) {
    if (this.state !== "awaiting-start") return this.fail({ code: CloseCode.protocolError, reason: "twilio: second start frame" })
    const token = frame.start.customParameters?.token
    if (token === undefined || token.length === 0) return this.refuse("missing session token parameter")
    const claims = this.host.verifyToken(token)
    if (Option.isNone(claims)) return this.refuse("invalid or expired session token")
    if (claims.value.kind !== "twilio") return this.refuse("session token was not issued for a Twilio stream")
    if (claims.value.callId !== frame.start.callSid) return this.refuse("session token was issued for another call")
    this.streamSid = frame.start.streamSid
    this.encoder = twilioOutboundEncoder(frame.start.streamSid)
    this.state = "open"
    const { exp: _exp, ...call } = claims.value
    const opened = this.host.open({
      ...call,
      accountSid: call.accountSid ?? frame.start.accountSid,
      streamSid: frame.start.streamSid,
      carrier: this
    })
    if (Either.isLeft(opened)) {
      this.state = "done"
      this.socket.close(opened.left.code, opened.left.reason)
    }
  }

  private refuse(reason: string) {
    this.state = "done"
    this.socket.close(CloseCode.policyViolation, `twilio: ${reason}`)
  }

  /** Closes this stream for a protocol violation; a live session hears it as a hard error. */
  private fail(problem: FrameProblem) {
    const events = this.events
    this.state = "done"
    this.socket.close(problem.code, problem.reason)
    events?.carrierGone({ kind: "carrier_protocol_error", message: `Twilio stream closed: ${problem.reason}` })
  }

  // CarrierLeg

  bind(events: CallerEvents): void {
    this.events = events
  }

  sendMedia(payload: string): void {
    if (this.encoder !== undefined) this.socket.send(this.encoder.media(payload))
  }

  sendMark(name: string): void {
    if (this.encoder !== undefined) this.socket.send(this.encoder.mark(name))
  }

  sendClear(): void {
    if (this.encoder !== undefined) this.socket.send(this.encoder.clear())
  }

  close(code: number, reason: string): void {
    this.state = "done"
    this.socket.close(code, reason)
  }
}
