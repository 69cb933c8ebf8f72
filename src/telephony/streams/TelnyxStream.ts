import { Either } from "effect"
import { makeFrameDecoder, parseJson } from "../../wire/FrameDecoding.js"
import { CloseCode, type WireSocket } from "../../core/WireSocket.js"
import { CarrierStreamLeg } from "./CarrierStreamLeg.js"
import { isCallerTrack } from "../../wire/MediaFields.js"
import type { SessionClaims } from "../SessionTokens.js"
import { ChunkReorder } from "./ChunkReorder.js"
import type { StreamHost } from "./StreamHost.js"
import {
  isTelnyxMediaFrame as isMedia,
  TELNYX_INBOUND_EVENTS,
  TelnyxInbound,
  telnyxMediaScanner,
  telnyxOutboundEncoder
} from "../../wire/TelnyxFrames.js"

const scanner = telnyxMediaScanner
const scanned = scanner.result

const decodeFrame = makeFrameDecoder("telnyx", TelnyxInbound, TELNYX_INBOUND_EVENTS)

/** How far ahead of the next expected chunk a chunk may arrive (32 frames = 640 ms of audio). */
export const TELNYX_REORDER_WINDOW = 32

const clipText = (text: string | undefined, max = 200) =>
  text === undefined ? undefined : text.length > max ? `${text.slice(0, max)}...` : text

/**
 * One Telnyx media stream. Its credentials (the session token on the URL, and the stream auth
 * token header when present) were checked on the upgrade, so `claims` are trusted; `start` binds
 * the stream to the session. Media chunks are put back in order before they reach the session.
 */
export class TelnyxStream extends CarrierStreamLeg {
  private streamId = ""
  private readonly reorder: ChunkReorder

  constructor(
    socket: WireSocket,
    host: StreamHost,
    private readonly claims: SessionClaims
  ) {
    super(socket, host, "telnyx", "Telnyx")
    this.reorder = new ChunkReorder(TELNYX_REORDER_WINDOW, (payload) => this.events?.callerMedia(payload))
  }

  onText(text: string): void {
    if (this.state === "done") return
    // The hot path: a live stream's media frame, written exactly as Telnyx writes it, for this stream.
    if (this.events !== undefined && scanner.scan(text) && scanned.isStream(text, this.streamId)) {
      if (!scanned.isCallerTrack(text)) return
      return this.media(scanned.chunk, scanned.payload(text))
    }
    const raw = parseJson(text)
    if (this.events !== undefined && isMedia(raw)) {
      if (raw.stream_id !== this.streamId) {
        return this.fail({ code: CloseCode.protocolError, reason: "telnyx: media frame for another stream_id" })
      }
      if (!isCallerTrack(raw.media.track)) return
      const chunk = raw.media.chunk
      return this.media(typeof chunk === "number" ? chunk : +chunk, raw.media.payload)
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
        // Audio held back for a missing chunk is still the caller's: deliver it before the end.
        return this.stop(() => this.reorder.flush())
      case "error": {
        const detail = clipText(frame.payload?.detail ?? frame.payload?.title) ?? "no detail"
        const code = frame.payload?.code !== undefined ? ` (code ${frame.payload.code})` : ""
        const events = this.events
        this.state = "done"
        this.socket.close(CloseCode.normal, "stream error reported")
        events?.carrierGone({ kind: "carrier_stream_error", message: `Telnyx stream error${code}: ${detail}` })
        return
      }
    }
  }

  private media(chunk: number, payload: string) {
    if (!this.reorder.push(chunk, payload)) {
      this.fail({ code: CloseCode.protocolError, reason: "telnyx: media chunks out of order beyond repair" })
    }
  }

  private start(frame: Extract<TelnyxInbound, { event: "start" }>) {
    if (this.state !== "awaiting-start") return this.secondStart()
    const { exp: _exp, ...call } = this.claims
    if (call.kind === "twilio") return this.refuse("session token was not issued for a Telnyx stream")
    const callControlId = frame.start.call_control_id
    if (call.kind === "telnyx-call-control" && callControlId !== undefined && callControlId !== call.callId) {
      return this.refuse("session token was issued for another call")
    }
    this.streamId = frame.stream_id
    this.openSession({ ...call, from: call.from ?? frame.start.from, to: call.to ?? frame.start.to, streamSid: frame.stream_id })
  }

  // CarrierLeg

  sendMedia(payload: string): void {
    if (this.state === "open") this.socket.send(telnyxOutboundEncoder.media(payload))
  }

  sendMark(name: string): void {
    if (this.state === "open") this.socket.send(telnyxOutboundEncoder.mark(name))
  }

  sendClear(): void {
    if (this.state === "open") this.socket.send(telnyxOutboundEncoder.clear())
  }
}
