import { Effect } from "effect"
import type { CarrierShape } from "../../kernel/Carrier.js"
import { dialTwiml, hangupTwiml } from "../../twiml/TwimlBuilder.js"

/**
 * A carrier adapter that answers the carrier's pending request instead of calling REST: what the
 * error fallback asks of the call becomes the TwiML/TeXML of the answer (the last request wins).
 * Used for a call that came back through the `<Redirect>` and for a call shed at the entry.
 */
export const answerCarrier = () => {
  let markup: string | undefined
  const carrier: CarrierShape = {
    hangup: () =>
      Effect.sync(() => {
        markup = hangupTwiml()
      }),
    transfer: (_call, to, callerId) =>
      Effect.sync(() => {
        markup = dialTwiml(to, callerId)
      }),
    applyTwiml: (_call, twiml) =>
      Effect.sync(() => {
        markup = twiml
      })
  }
  return { carrier, markup: () => markup }
}
