import { Either, Option } from "effect"
import { makeFrameDecoder, parseJson } from "../../wire/FrameDecoding.js"
import { CloseCode, type WireSocket } from "../../core/WireSocket.js"
import { CarrierStreamLeg } from "./CarrierStreamLeg.js"
import { isCallerTrack } from "../../wire/MediaFields.js"
import type { StreamHost } from "./StreamHost.js"
import {
  isTwilioMediaFrame as isMedia,
  TWILIO_INBOUND_EVENTS,
  TwilioInbound,
  twilioMediaScanner,
  twilioOutboundEncoder
} from "../../wire/TwilioFrames.js"

const scanner = twilioMediaScanner
const scanned = scanner.result

const decodeFrame = makeFrameDecoder("twilio", TwilioInbound, TWILIO_INBOUND_EVENTS)

type Encoder = ReturnType<typeof twilioOutboundEncoder>

/**
 * One Twilio media stream: authenticates it at `start` (the session token in customParameters,
 * bound to this CallSid), then turns its frames into CallerEvents and the session's requests into
 * Twilio frames. Anything malformed closes this socket, and only this one.
 */
export class TwilioStream extends CarrierStreamLeg {
  private encoder: Encoder | undefined
  private streamSid = ""

  constructor(socket: WireSocket, host: StreamHost) {
    super(socket, host, "twilio", "Twilio")
  }

  onText(text: string): void {
    if (this.state === "done") return
    // The hot path: a live stream's media frame, written exactly as Twilio writes it, for this stream.
    if (this.events !== undefined && scanner.scan(text) && scanned.isStream(text, this.streamSid)) {
      if (scanned.isCallerTrack(text)) this.events.callerMedia(scanned.payload(text))
      return
    }
    const raw = parseJson(text)
    // Any other media frame of a live stream, checked by a precompiled guard.
    if (this.events !== undefined && isMedia(raw)) {
      if (raw.streamSid !== undefined && raw.streamSid !== this.streamSid) {
        return this.fail({ code: CloseCode.protocolError, reason: "twilio: media frame for another streamSid" })
      }
      if (isCallerTrack(raw.media.track)) this.events.callerMedia(raw.media.payload)
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
        return this.mediaBeforeStart()
      case "dtmf":
        return this.dtmf(frame.dtmf.digit)
      case "mark":
        return this.mark(frame.mark.name)
      case "stop":
        return this.stop()
    }
  }

  private start(frame: Extract<TwilioInbound, { event: "start" }>) {
    if (this.state !== "awaiting-start") return this.secondStart()
    const token = frame.start.customParameters?.token
    if (token === undefined || token.length === 0) return this.refuse("missing session token parameter")
    const claims = this.host.verifyToken(token)
    if (Option.isNone(claims)) return this.refuse("invalid or expired session token")
    if (claims.value.kind !== "twilio") return this.refuse("session token was not issued for a Twilio stream")
    if (claims.value.callId !== frame.start.callSid) return this.refuse("session token was issued for another call")
    this.streamSid = frame.start.streamSid
    this.encoder = twilioOutboundEncoder(frame.start.streamSid)
    const { exp: _exp, ...call } = claims.value
    this.openSession({ ...call, accountSid: call.accountSid ?? frame.start.accountSid, streamSid: frame.start.streamSid })
  }

  // CarrierLeg

  sendMedia(payload: string): void {
    if (this.encoder !== undefined) this.socket.send(this.encoder.media(payload))
  }

  sendMark(name: string): void {
    if (this.encoder !== undefined) this.socket.send(this.encoder.mark(name))
  }

  sendClear(): void {
    if (this.encoder !== undefined) this.socket.send(this.encoder.clear())
  }
}
