/**
 * The public paths at which carriers reach callgate: the entry webhooks, the media streams the entry
 * answers point to, the `<Redirect>` after a stream, and Twilio's progress reports of outbound calls.
 * Routes (http/), entry answers (telephony/) and outbound calls (calls/) share them.
 */
export const EntryPaths = {
  twilioVoice: "/telephony/twilio/voice",
  twilioStream: "/telephony/twilio/stream",
  telnyxTexml: "/telephony/telnyx/texml",
  telnyxCallControl: "/telephony/telnyx/call-control",
  telnyxStream: "/telephony/telnyx/stream",
  /** Where the entry answer's `<Redirect>` sends a call whose stream ended (docs/reliability.md). */
  twilioAfterStream: "/telephony/twilio/after-stream",
  telnyxAfterStream: "/telephony/telnyx/after-stream",
  /** Where Twilio reports the progress of calls callgate placed. */
  twilioStatus: "/telephony/twilio/status",
  /** Where Twilio posts the asynchronous answering-machine verdict (AnsweredBy) of calls callgate placed. */
  twilioAmd: "/telephony/twilio/amd",
  /**
   * Where a transfer reports back (docs/fallback.md, "Transfer outcomes"): Twilio and TeXML post the
   * `<Dial action>` (the outcome, answered with what the caller hears next) and the dialled number's
   * status callbacks; Telnyx Call Control posts the new leg's webhooks.
   */
  twilioTransferOutcome: "/telephony/twilio/transfer-outcome",
  twilioTransferProgress: "/telephony/twilio/transfer-progress",
  telnyxTransferOutcome: "/telephony/telnyx/transfer-outcome",
  telnyxTransferProgress: "/telephony/telnyx/transfer-progress",
  telnyxTransferEvents: "/telephony/telnyx/transfer-events"
} as const
