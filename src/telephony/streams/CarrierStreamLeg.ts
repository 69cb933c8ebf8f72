import { Either } from "effect"
import type { CallerEvents, CarrierLeg, LegFault, StreamOpening } from "../../kernel/CallLegs.js"
import { type FrameProblem, parseJson } from "../../frames/FrameDecoding.js"
import { isCallerTrack } from "../../frames/MediaFields.js"
import type { MediaScanner } from "../../frames/MediaScanner.js"
import { CloseCode, type WireListener, type WireSocket } from "../../frames/WireSocket.js"
import type { SessionClaims } from "../SessionTokens.js"
import type { StreamHost } from "./StreamHost.js"

/** The session's reserved agent from the token's placement claims (see SessionInfo.reservedAgent). */
export const reservedAgentOf = (placedOn: string | undefined, agentSocket: string | undefined): string | null | undefined =>
  placedOn === undefined ? undefined : (agentSocket ?? null)

/** Frames held while the token is being spent (a store round trip): 25 s of 20 ms frames at most. */
const MAX_HELD_FRAMES = 1250

/** A media frame's fields, as the full parse reads them (the slow path: off the template, or before start). */
export interface CarrierMedia {
  /** The stream id the frame names; undefined when the dialect lets it leave it out and it did. */
  readonly stream: string | undefined
  readonly track: string | undefined
  /** The chunk number, for dialects whose chunks may arrive out of order; undefined otherwise. */
  readonly chunk: number | undefined
  /** The frame's timestamp in ms since the stream began; -1 when it has none (see timestampOf). */
  readonly timestamp: number
  readonly payload: string
}

/** Every non-media frame of a carrier dialect, decoded into what the shared leg acts on. */
export type CarrierFrame<Start> =
  | { readonly event: "connected" }
  | { readonly event: "start"; readonly start: Start }
  /** A media frame before the session opened (a live stream's media takes the media paths). */
  | { readonly event: "media" }
  | { readonly event: "dtmf"; readonly digit: string }
  | { readonly event: "mark"; readonly name: string }
  | { readonly event: "stop" }
  /** The carrier reports a stream error (Telnyx): the stream is over. */
  | { readonly event: "error"; readonly message: string }

/** A decoded frame both carriers' dialects write alike (the start and Telnyx's error are each dialect's own). */
export type SharedCarrierFrame =
  | { readonly event: "connected" | "media" | "stop" }
  | { readonly event: "dtmf"; readonly dtmf: { readonly digit: string } }
  | { readonly event: "mark"; readonly mark: { readonly name: string } }

/** A frame both dialects share, as the leg reads it. */
export const sharedCarrierFrame = (frame: SharedCarrierFrame): CarrierFrame<never> => {
  switch (frame.event) {
    case "dtmf":
      return { event: "dtmf", digit: frame.dtmf.digit }
    case "mark":
      return { event: "mark", name: frame.mark.name }
    default:
      return { event: frame.event }
  }
}

/**
 * One carrier's media-stream dialect, as the shared leg needs it: its names, its media fast path
 * (src/frames/MediaScanner.ts), its full-parse media guard, and its decoder for everything else.
 */
export interface CarrierStreamDialect<Start> {
  /** "twilio" or "telnyx": prefixes close reasons. */
  readonly name: string
  /** "Twilio" or "Telnyx": names the carrier in hard error messages. */
  readonly carrierName: string
  /** The frame field naming the stream ("streamSid", "stream_id"), for close reasons. */
  readonly streamField: string
  readonly scanner: MediaScanner
  /** The media fields when `raw` is a valid media frame (the schema's guard), else undefined. */
  readonly media: (raw: unknown) => CarrierMedia | undefined
  /** The mark's name when `raw` is a valid mark frame (the schema's guard), else undefined: a mark echo skips the full decode. */
  readonly markName: (raw: unknown) => string | undefined
  readonly decode: (raw: unknown) => Either.Either<CarrierFrame<Start>, FrameProblem>
}

/**
 * What every carrier media stream does the same way, whatever its dialect: reading frames (the
 * media fast path, then the full parse, then one event switch), its life (awaiting-start, open,
 * done), refusing bad credentials, closing on protocol violations, opening the session, and the
 * control frames (dtmf, mark, stop, error). A dialect's subclass authenticates its `start`
 * (`begin`), writes its outbound frames, and may hold media back (`deliver`, `beforeStop`).
 *
 * The per-frame path is synchronous and allocates nothing beyond the payload's slice: a media
 * frame written exactly as the carrier writes it is read by the dialect's scanner; anything else
 * takes the full parse and is handled exactly as before the scanner existed.
 */
export abstract class CarrierStreamLeg<Start> implements WireListener, CarrierLeg {
  protected state: "awaiting-start" | "open" | "done" = "awaiting-start"
  protected events: CallerEvents | undefined
  /** The stream id from `start`: media frames naming another are refused. */
  protected streamId = ""
  /** Set while the session token is being spent: frames arriving meanwhile wait here, in order. */
  private held: Array<string> | undefined

  constructor(
    protected readonly socket: WireSocket,
    protected readonly host: StreamHost,
    private readonly dialect: CarrierStreamDialect<Start>
  ) {}

  /** Authenticates and opens the stream from its `start` frame (state is "awaiting-start"). */
  protected abstract begin(start: Start): void

  /** Hands one caller media frame to the session; a dialect with out-of-order chunks reorders here. */
  protected deliver(_chunk: number | undefined, payload: string, timestampMs: number): void {
    this.events?.callerMedia(payload, timestampMs)
  }

  /** Runs for a live session when the carrier stops, before the session hears it. */
  protected beforeStop(): void {}

  onText(text: string): void {
    if (this.state === "done") return
    if (this.held !== undefined) return this.hold(text)
    const events = this.events
    if (events !== undefined) {
      // The hot path: a live stream's media frame, written exactly as the carrier writes it, for this stream.
      const scanner = this.dialect.scanner
      if (scanner.scan(text) && scanner.result.isStream(text, this.streamId)) {
        const scanned = scanner.result
        if (scanned.isCallerTrack(text)) this.deliver(scanned.chunk < 0 ? undefined : scanned.chunk, scanned.payload(text), scanned.timestamp)
        return
      }
    }
    const raw = parseJson(text)
    if (events !== undefined) {
      // Any other media frame of a live stream, checked by the dialect's precompiled guard.
      const media = this.dialect.media(raw)
      if (media !== undefined) return this.media(media)
      // The other frame of every turn: the echo of a mark (the agent's, and callgate's playout mark).
      const mark = this.dialect.markName(raw)
      if (mark !== undefined) return events.carrierMark(mark)
    }
    const decoded = this.dialect.decode(raw)
    if (Either.isLeft(decoded)) return this.fail(decoded.left)
    const frame = decoded.right
    switch (frame.event) {
      case "connected":
        return this.connected()
      case "start":
        if (this.state !== "awaiting-start") return this.protocolError("second start frame")
        return this.begin(frame.start)
      case "media":
        return this.protocolError("media frame before start")
      case "dtmf":
        if (this.events === undefined) return this.protocolError("dtmf frame before start")
        return this.events.callerDtmf(frame.digit)
      case "mark":
        if (this.events === undefined) return this.protocolError("mark frame before start")
        return this.events.carrierMark(frame.name)
      case "stop":
        return this.stop()
      case "error":
        return this.end(CloseCode.normal, "stream error reported", { kind: "carrier_stream_error", message: frame.message })
    }
  }

  /** Past `start` (or closed): the stream has authenticated, so HANDSHAKE_TIMEOUT no longer applies. */
  get authenticated(): boolean {
    return this.state !== "awaiting-start"
  }

  private connectedSeen = false

  /** `connected` may come once, before anything else matters (docs/security.md, "Per-socket limits"). */
  protected connected() {
    if (this.connectedSeen) return this.fail({ code: CloseCode.policyViolation, reason: `${this.dialect.name}: second connected frame` })
    this.connectedSeen = true
  }

  onClose(_code: number, _reason: string, fault: string | undefined): void {
    if (this.state === "done") return
    this.state = "done"
    this.events?.carrierGone(
      fault === undefined ? undefined : { kind: "carrier_stream_error", message: `${this.dialect.carrierName} stream socket failed: ${fault}` }
    )
  }

  private media(media: CarrierMedia) {
    if (media.stream !== undefined && media.stream !== this.streamId) {
      return this.protocolError(`media frame for another ${this.dialect.streamField}`)
    }
    if (isCallerTrack(media.track)) this.deliver(media.chunk, media.payload, media.timestamp)
  }

  /** `stop`: a live session hears it after `beforeStop`; before start, the stream just closes. */
  private stop() {
    const events = this.events
    if (events === undefined) {
      this.state = "done"
      return this.socket.close(CloseCode.normal, "stream stopped before start")
    }
    this.beforeStop()
    this.state = "done"
    events.carrierStopped()
  }

  /** Closes this stream; a live session hears `fault` (or a normal end when there is none). */
  protected end(code: number, reason: string, fault: LegFault) {
    const events = this.events
    this.state = "done"
    this.socket.close(code, reason)
    events?.carrierGone(fault)
  }

  /** Bad credentials: closed before any agent hears the stream. */
  protected refuse(reason: string) {
    this.host.authFailed?.()
    this.state = "done"
    this.socket.close(CloseCode.policyViolation, `${this.dialect.name}: ${reason}`)
  }

  /** Closes this stream for a protocol violation; a live session hears it as a hard error. */
  protected fail(problem: FrameProblem) {
    this.end(problem.code, problem.reason, {
      kind: "carrier_protocol_error",
      message: `${this.dialect.carrierName} stream closed: ${problem.reason}`
    })
  }

  protected protocolError(what: string) {
    this.fail({ code: CloseCode.protocolError, reason: `${this.dialect.name}: ${what}` })
  }

  /** A frame that arrived while the token is being spent; replayed once the session is open. */
  private hold(text: string) {
    if (this.held!.length >= MAX_HELD_FRAMES) {
      this.held = undefined
      return this.fail({ code: CloseCode.tryAgainLater, reason: `${this.dialect.name}: the session token could not be checked in time` })
    }
    this.held!.push(text)
  }

  /**
   * Spends the session token (single use across the fleet), then opens the session and replays
   * the frames that arrived meanwhile; a token already spent closes the stream with 1008.
   */
  protected spendThenOpen(claims: SessionClaims, opening: Omit<StreamOpening, "carrier">) {
    this.held = []
    this.host.spend(claims, this.dialect.name === "twilio" ? "twilio" : "telnyx", (first) => {
      const held = this.held ?? []
      this.held = undefined
      if (this.state === "done") return
      if (!first) return this.refuse("session token was already used")
      this.openSession(opening)
      for (const text of held) {
        if (this.state !== "open") return
        this.onText(text)
      }
    })
  }

  /** Opens the session for this stream, or closes the stream with the registry's refusal. */
  protected openSession(opening: Omit<StreamOpening, "carrier">) {
    this.state = "open"
    this.streamId = opening.streamSid
    const opened = this.host.open({ ...opening, carrier: this })
    if (Either.isLeft(opened)) {
      this.state = "done"
      this.socket.close(opened.left.code, opened.left.reason)
    }
  }

  // CarrierLeg

  bind(events: CallerEvents): void {
    this.events = events
  }

  abstract sendMedia(payload: string): void
  abstract sendMark(name: string): void
  abstract sendClear(): void

  close(code: number, reason: string): void {
    this.state = "done"
    this.socket.close(code, reason)
  }
}
