import { Either } from "effect"
import { telnyxAudioFormat } from "../../kernel/AudioFormat.js"
import { makeFrameDecoder } from "../../frames/FrameDecoding.js"
import { timestampOf } from "../../frames/MediaFields.js"
import type { WireSocket } from "../../frames/WireSocket.js"
import { type CarrierFrame, CarrierStreamLeg, type CarrierStreamDialect, reservedAgentOf, sharedCarrierFrame } from "./CarrierStreamLeg.js"
import type { SessionClaims } from "../SessionTokens.js"
import { ChunkReorder } from "./ChunkReorder.js"
import type { StreamHost } from "./StreamHost.js"
import {
  isTelnyxMarkFrame,
  isTelnyxMediaFrame,
  TELNYX_INBOUND_EVENTS,
  TelnyxInbound,
  telnyxMediaScanner,
  telnyxOutboundEncoder
} from "../../frames/TelnyxFrames.js"

type TelnyxStartFrame = Extract<TelnyxInbound, { event: "start" }>

const decodeFrame = makeFrameDecoder("telnyx", TelnyxInbound, TELNYX_INBOUND_EVENTS)

const clipText = (text: string | undefined, max = 200) =>
  text === undefined ? undefined : text.length > max ? `${text.slice(0, max)}...` : text

/** Telnyx media streaming as the shared carrier leg reads it; `start` keeps its stream_id beside the start fields. */
export const telnyxStreamDialect: CarrierStreamDialect<TelnyxStartFrame> = {
  name: "telnyx",
  carrierName: "Telnyx",
  streamField: "stream_id",
  scanner: telnyxMediaScanner,
  media: (raw) => {
    if (!isTelnyxMediaFrame(raw)) return undefined
    const chunk = raw.media.chunk
    return {
      stream: raw.stream_id,
      track: raw.media.track,
      chunk: typeof chunk === "number" ? chunk : +chunk,
      timestamp: timestampOf(raw.media.timestamp),
      payload: raw.media.payload
    }
  },
  markName: (raw) => (isTelnyxMarkFrame(raw) ? raw.mark.name : undefined),
  decode: (raw) =>
    Either.map(decodeFrame(raw), (frame): CarrierFrame<TelnyxStartFrame> => {
      switch (frame.event) {
        case "start":
          return { event: "start", start: frame }
        case "error": {
          const detail = clipText(frame.payload?.detail ?? frame.payload?.title) ?? "no detail"
          const code = frame.payload?.code !== undefined ? ` (code ${frame.payload.code})` : ""
          return { event: "error", message: `Telnyx stream error${code}: ${detail}` }
        }
        default:
          return sharedCarrierFrame(frame)
      }
    })
}

/** How far ahead of the next expected chunk a chunk may arrive (32 frames = 640 ms of audio). */
export const TELNYX_REORDER_WINDOW = 32

/**
 * One Telnyx media stream. Its credentials (the session token on the URL, and the stream auth
 * token header when present) were checked on the upgrade, so `claims` are trusted; `start` binds
 * the stream to the session. Media chunks are put back in order before they reach the session.
 */
export class TelnyxStream extends CarrierStreamLeg<TelnyxStartFrame> {
  private readonly reorder: ChunkReorder

  constructor(
    socket: WireSocket,
    host: StreamHost,
    private readonly claims: SessionClaims,
    dialect: CarrierStreamDialect<TelnyxStartFrame> = telnyxStreamDialect
  ) {
    super(socket, host, dialect)
    this.reorder = new ChunkReorder(TELNYX_REORDER_WINDOW, (payload, timestampMs) => this.events?.callerMedia(payload, timestampMs))
  }

  protected override deliver(chunk: number | undefined, payload: string, timestampMs: number) {
    if (!this.reorder.push(chunk ?? 0, payload, timestampMs)) this.protocolError("media chunks out of order beyond repair")
  }

  /** Audio held back for a missing chunk is still the caller's: delivered before the end. */
  protected override beforeStop() {
    this.reorder.flush()
  }

  protected begin(frame: TelnyxStartFrame) {
    const { exp: _exp, jti, placedOn, agentSocket, ...call } = this.claims
    if (call.kind === "twilio") return this.refuse("session token was not issued for a Telnyx stream")
    const callControlId = frame.start.call_control_id
    if (call.kind === "telnyx-call-control" && callControlId !== undefined && callControlId !== call.callId) {
      return this.refuse("session token was issued for another call")
    }
    const mediaFormat = telnyxAudioFormat(frame.start.media_format.encoding, frame.start.media_format.sample_rate)
    if (mediaFormat === undefined) {
      return this.refuse(`unsupported media format ${frame.start.media_format.encoding} at ${frame.start.media_format.sample_rate} Hz`)
    }
    this.spendThenOpen(this.claims, { ...call, mediaFormat, reservedAgent: reservedAgentOf(placedOn, agentSocket), from: call.from ?? frame.start.from, to: call.to ?? frame.start.to, streamSid: frame.stream_id, ...(call.kind === "telnyx-call-control" ? { streamRef: jti } : {}) })
  }

  // CarrierLeg

  sendMedia(payload: string): void {
    if (this.state === "open") this.socket.sendAscii(telnyxOutboundEncoder.media(payload))
  }

  sendMark(name: string): void {
    if (this.state === "open") this.socket.send(telnyxOutboundEncoder.mark(name))
  }

  sendClear(): void {
    if (this.state === "open") this.socket.send(telnyxOutboundEncoder.clear())
  }
}
