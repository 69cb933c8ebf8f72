import { Either } from "effect"
import type { CallerEvents, CarrierLeg, StreamOpening } from "../../core/CallLegs.js"
import type { FrameProblem } from "../../wire/FrameDecoding.js"
import { CloseCode, type WireListener, type WireSocket } from "../../core/WireSocket.js"
import type { StreamHost } from "./StreamHost.js"

/**
 * What every carrier media stream does the same way, whatever its dialect: its life
 * (awaiting-start, open, done), refusing bad credentials, closing on protocol violations, opening
 * the session, and the control frames (dtmf, mark, stop). Subclasses parse their dialect and keep
 * the per-frame media path to themselves.
 */
export abstract class CarrierStreamLeg implements WireListener, CarrierLeg {
  protected state: "awaiting-start" | "open" | "done" = "awaiting-start"
  protected events: CallerEvents | undefined

  constructor(
    protected readonly socket: WireSocket,
    protected readonly host: StreamHost,
    /** "twilio" or "telnyx": prefixes close reasons. */
    private readonly dialect: string,
    /** "Twilio" or "Telnyx": names the carrier in hard error messages. */
    private readonly carrierName: string
  ) {}

  abstract onText(text: string): void

  onClose(_code: number, _reason: string, fault: string | undefined): void {
    if (this.state === "done") return
    this.state = "done"
    this.events?.carrierGone(
      fault === undefined ? undefined : { kind: "carrier_stream_error", message: `${this.carrierName} stream socket failed: ${fault}` }
    )
  }

  /** Bad credentials: closed before any agent hears the stream. */
  protected refuse(reason: string) {
    this.state = "done"
    this.socket.close(CloseCode.policyViolation, `${this.dialect}: ${reason}`)
  }

  /** Closes this stream for a protocol violation; a live session hears it as a hard error. */
  protected fail(problem: FrameProblem) {
    const events = this.events
    this.state = "done"
    this.socket.close(problem.code, problem.reason)
    events?.carrierGone({ kind: "carrier_protocol_error", message: `${this.carrierName} stream closed: ${problem.reason}` })
  }

  /** Opens the session for this stream, or closes the stream with the registry's refusal. */
  protected openSession(opening: Omit<StreamOpening, "carrier">) {
    this.state = "open"
    const opened = this.host.open({ ...opening, carrier: this })
    if (Either.isLeft(opened)) {
      this.state = "done"
      this.socket.close(opened.left.code, opened.left.reason)
    }
  }

  protected dtmf(digit: string) {
    if (this.events === undefined) return this.fail({ code: CloseCode.protocolError, reason: `${this.dialect}: dtmf frame before start` })
    this.events.callerDtmf(digit)
  }

  protected mark(name: string) {
    if (this.events === undefined) return this.fail({ code: CloseCode.protocolError, reason: `${this.dialect}: mark frame before start` })
    this.events.carrierMark(name)
  }

  /** `beforeEnd` runs only for a live session, before it hears the stop (Telnyx flushes held chunks). */
  protected stop(beforeEnd?: () => void) {
    const events = this.events
    if (events === undefined) {
      this.state = "done"
      return this.socket.close(CloseCode.normal, "stream stopped before start")
    }
    beforeEnd?.()
    this.state = "done"
    events.carrierStopped()
  }

  protected mediaBeforeStart() {
    this.fail({ code: CloseCode.protocolError, reason: `${this.dialect}: media frame before start` })
  }

  protected secondStart() {
    this.fail({ code: CloseCode.protocolError, reason: `${this.dialect}: second start frame` })
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
