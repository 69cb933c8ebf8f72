import { Context, Data, type Effect } from "effect"

export type Provider = "twilio" | "telnyx"

/**
 * How a call reached callgate, which decides how its carrier is driven:
 * - `twilio`: Twilio voice webhook + Media Stream; REST: Calls API (call update with TwiML).
 * - `telnyx-texml`: Telnyx TeXML application; REST: TeXML Calls API (call update with TeXML).
 * - `telnyx-call-control`: Telnyx Call Control application; REST: call commands on call_control_id.
 */
export type CallKind = "twilio" | "telnyx-texml" | "telnyx-call-control"

export const providerOf = (kind: CallKind): Provider => (kind === "twilio" ? "twilio" : "telnyx")

/** Enough to address a live call through its carrier's REST API. */
export interface CallRef {
  readonly kind: CallKind
  /** Twilio CallSid; Telnyx TeXML CallSid; Telnyx call_control_id. */
  readonly callId: string
  /** Twilio account SID, or Telnyx TeXML account/connection id, when the REST path needs it. */
  readonly accountSid?: string | undefined
}

/**
 * A carrier REST call failed. `retryable` is true only where repeating the request is safe and
 * may help (5xx, 429, connection errors). A call that has already ended is not an error: the
 * adapters treat it as done.
 */
export class CarrierError extends Data.TaggedError("CarrierError")<{
  readonly provider: Provider
  readonly operation: string
  readonly status?: number | undefined
  readonly detail: string
  readonly retryable: boolean
  /**
   * The request can never succeed as asked: a TwiML document with a verb this call kind cannot
   * run (Call Control), or one too large for the carrier. Nothing was sent to the carrier; callers
   * treat it like an unexpected fallback answer (log it and end the call).
   */
  readonly unexpected?: boolean | undefined
}> {
  override get message() {
    return `${this.provider} ${this.operation} failed${this.status !== undefined ? ` (HTTP ${this.status})` : ""}: ${this.detail}`
  }
}

/**
 * How a transfer reports back (docs/fallback.md, "Transfer outcomes"): Twilio and TeXML get
 * `<Dial action=outcomeUrl timeout>` with `<Number statusCallback=progressUrl>`; Telnyx Call Control
 * gets `timeout_secs` and `webhook_url=callControlEventsUrl` for the new leg's webhooks.
 */
export interface TransferTracking {
  readonly outcomeUrl: string
  readonly progressUrl: string
  readonly callControlEventsUrl: string
  /** TRANSFER_RING_TIMEOUT in whole seconds, within the carriers' 5 to 600. */
  readonly timeoutSeconds: number
}

/** What callgate asks of a carrier for one live call (a rescue may answer it without REST: AfterStreamEntry). */
export interface CarrierShape {
  /** Ends the call. Already ended counts as done. */
  readonly hangup: (call: CallRef) => Effect.Effect<void, CarrierError>
  /** Moves the call to `to` (E.164); `callerId` is shown to the callee where the carrier allows. */
  readonly transfer: (call: CallRef, to: string, callerId?: string, tracking?: TransferTracking) => Effect.Effect<void, CarrierError>
  /**
   * Hands the call over to a TwiML/TeXML `<Response>` document. For Call Control calls the
   * supported verbs are translated to call commands.
   */
  readonly applyTwiml: (call: CallRef, twiml: string) => Effect.Effect<void, CarrierError>
}

/** An outbound call to place: Twilio Calls API, or a Telnyx Call Control dial on TELNYX_CONNECTION_ID. */
export interface OutboundDial {
  readonly kind: Extract<CallKind, "twilio" | "telnyx-call-control">
  readonly to: string
  readonly from: string
  /** Where the carrier asks what to do once the call is answered (callgate's entry for this call). */
  readonly answerUrl: string
  /** Where Twilio reports the call's progress (initiated, ringing, answered, completed); Telnyx reports to `answerUrl`. */
  readonly statusUrl: string
  readonly timeoutSeconds: number
  /**
   * The carrier's answering-machine detection, asynchronous (docs/calls.md, "Answering-machine
   * detection"); Twilio posts the verdict to `resultUrl`, Telnyx to `answerUrl`.
   */
  readonly machineDetection?: { readonly mode: "detect" | "detect-message-end"; readonly resultUrl: string } | undefined
}

/** The carriers' REST APIs: the live-call requests, and placing and canceling calls. */
export interface CarriersShape extends CarrierShape {
  /** Places the call; answers where it is. Never repeated after an ambiguous failure: that could place two calls. */
  readonly place: (dial: OutboundDial) => Effect.Effect<CallRef, CarrierError>
  /** Stops a call that is not answered yet (Twilio Status=canceled, Telnyx hang-up). Already ended counts as done. */
  readonly cancel: (call: CallRef) => Effect.Effect<void, CarrierError>
}

/** Dispatches to the Twilio or Telnyx adapter by `CallRef.kind`. */
export class Carriers extends Context.Tag("callgate/Carriers")<Carriers, CarriersShape>() {}
