import twilio from "twilio"

/**
 * Every TwiML/TeXML document callgate writes, built with the twilio SDK's TwiML builder (which
 * escapes what it is given). Telnyx TeXML reads the same documents. Pure.
 */

/** `<Response><Hangup/></Response>`: the call ends. */
export const hangupTwiml = (): string => {
  const response = new twilio.twiml.VoiceResponse()
  response.hangup()
  return response.toString()
}

/** A sentence for the caller, then the call ends. */
export const sayAndHangupTwiml = (sentence: string): string => {
  const response = new twilio.twiml.VoiceResponse()
  response.say(sentence)
  response.hangup()
  return response.toString()
}

/** Where a tracked `<Dial>` reports: its `action` (the outcome), its number's status callbacks, its ring timeout. */
export interface DialTracking {
  readonly outcomeUrl: string
  readonly progressUrl: string
  readonly timeoutSeconds: number
}

/**
 * A document that moves the call to `to`, showing `callerId` where given. Tracked
 * (docs/fallback.md, "Transfer outcomes"): `<Dial action timeout>` and `<Number statusCallback
 * statusCallbackEvent="initiated ringing answered completed">`, so the carrier reports the outcome
 * and asks callgate what the caller hears after it.
 */
export const dialTwiml = (to: string, callerId?: string, tracking?: DialTracking): string => {
  const response = new twilio.twiml.VoiceResponse()
  if (tracking === undefined) {
    response.dial(callerId !== undefined ? { callerId } : {}, to)
    return response.toString()
  }
  const dial = response.dial({
    ...(callerId !== undefined ? { callerId } : {}),
    action: tracking.outcomeUrl,
    method: "POST",
    timeout: tracking.timeoutSeconds
  })
  dial.number(
    { statusCallback: tracking.progressUrl, statusCallbackMethod: "POST", statusCallbackEvent: ["initiated", "ringing", "answered", "completed"] },
    to
  )
  return response.toString()
}

/**
 * `<Response><Connect><Stream url attributes>` with `<Parameter>`s, then `<Redirect>` to
 * `redirectUrl` (the verb a call goes on to when its stream ends: docs/reliability.md).
 */
export const connectStreamTwiml = (
  attributes: Record<string, string>,
  parameters: ReadonlyArray<readonly [string, string | undefined]>,
  redirectUrl?: string
): string => {
  const response = new twilio.twiml.VoiceResponse()
  const stream = response.connect().stream(attributes as { url: string })
  for (const [name, value] of parameters) if (value !== undefined) stream.parameter({ name, value })
  if (redirectUrl !== undefined) response.redirect({ method: "POST" }, redirectUrl)
  return response.toString()
}
