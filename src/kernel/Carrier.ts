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

/** What callgate asks of a carrier for one live call. */
export interface CarrierShape {
  /** Ends the call. Already ended counts as done. */
  readonly hangup: (call: CallRef) => Effect.Effect<void, CarrierError>
  /** Moves the call to `to` (E.164); `callerId` is shown to the callee where the carrier allows. */
  readonly transfer: (call: CallRef, to: string, callerId?: string) => Effect.Effect<void, CarrierError>
  /**
   * Hands the call over to a TwiML/TeXML `<Response>` document. For Call Control calls the
   * supported verbs are translated to call commands.
   */
  readonly applyTwiml: (call: CallRef, twiml: string) => Effect.Effect<void, CarrierError>
}

/** Dispatches to the Twilio or Telnyx adapter by `CallRef.kind`. */
export class Carriers extends Context.Tag("callgate/Carriers")<Carriers, CarrierShape>() {}
