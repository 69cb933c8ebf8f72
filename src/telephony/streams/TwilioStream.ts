import { Either, Option } from "effect"
import { makeFrameDecoder } from "../../frames/FrameDecoding.js"
import { timestampOf } from "../../frames/MediaFields.js"
import type { WireSocket } from "../../frames/WireSocket.js"
import { type CarrierFrame, CarrierStreamLeg, type CarrierStreamDialect, reservedAgentOf, sharedCarrierFrame } from "./CarrierStreamLeg.js"
import type { StreamHost } from "./StreamHost.js"
import {
  isTwilioMarkFrame,
  isTwilioMediaFrame,
  TWILIO_INBOUND_EVENTS,
  TwilioInbound,
  twilioMediaScanner,
  twilioOutboundEncoder
} from "../../frames/TwilioFrames.js"

type TwilioStart = Extract<TwilioInbound, { event: "start" }>["start"]

const decodeFrame = makeFrameDecoder("twilio", TwilioInbound, TWILIO_INBOUND_EVENTS)

/** Twilio Media Streams as the shared carrier leg reads them. */
export const twilioStreamDialect: CarrierStreamDialect<TwilioStart> = {
  name: "twilio",
  carrierName: "Twilio",
  streamField: "streamSid",
  scanner: twilioMediaScanner,
  media: (raw) =>
    isTwilioMediaFrame(raw)
      ? { stream: raw.streamSid, track: raw.media.track, chunk: undefined, timestamp: timestampOf(raw.media.timestamp), payload: raw.media.payload }
      : undefined,
  markName: (raw) => (isTwilioMarkFrame(raw) ? raw.mark.name : undefined),
  decode: (raw) =>
    Either.map(decodeFrame(raw), (frame): CarrierFrame<TwilioStart> =>
      frame.event === "start" ? { event: "start", start: frame.start } : sharedCarrierFrame(frame)
    )
}

type Encoder = ReturnType<typeof twilioOutboundEncoder>

/**
 * One Twilio media stream: authenticates it at `start` (the session token in customParameters,
 * bound to this CallSid), then turns its frames into CallerEvents (CarrierStreamLeg) and the
 * session's requests into Twilio frames. Anything malformed closes this socket, and only this one.
 */
export class TwilioStream extends CarrierStreamLeg<TwilioStart> {
  private encoder: Encoder | undefined

  constructor(socket: WireSocket, host: StreamHost, dialect: CarrierStreamDialect<TwilioStart> = twilioStreamDialect) {
    super(socket, host, dialect)
  }

  protected begin(start: TwilioStart) {
    const token = start.customParameters?.token
    if (token === undefined || token.length === 0) return this.refuse("missing session token parameter")
    const claims = this.host.verifyToken(token)
    if (Option.isNone(claims)) return this.refuse("invalid or expired session token")
    if (claims.value.kind !== "twilio") return this.refuse("session token was not issued for a Twilio stream")
    if (claims.value.callId !== start.callSid) return this.refuse("session token was issued for another call")
    this.encoder = twilioOutboundEncoder(start.streamSid)
    const { exp: _exp, jti: _jti, placedOn, agentSocket, ...call } = claims.value
    this.spendThenOpen(claims.value, { ...call, reservedAgent: reservedAgentOf(placedOn, agentSocket), accountSid: call.accountSid ?? start.accountSid, streamSid: start.streamSid })
  }

  // CarrierLeg

  sendMedia(payload: string): void {
    const encoder = this.encoder
    if (encoder === undefined) return
    if (encoder.mediaIsAscii) this.socket.sendAscii(encoder.media(payload))
    else this.socket.send(encoder.media(payload))
  }

  sendMark(name: string): void {
    if (this.encoder !== undefined) this.socket.send(this.encoder.mark(name))
  }

  sendClear(): void {
    if (this.encoder !== undefined) this.socket.send(this.encoder.clear())
  }
}
