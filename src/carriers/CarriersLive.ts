import { Effect, Layer } from "effect"
import { type CallRef, Carriers } from "../kernel/Carrier.js"
import { TelnyxCarrier } from "./TelnyxCarrier.js"
import { TwilioCarrier } from "./TwilioCarrier.js"

/**
 * The `Carriers` port over the two adapters, by `CallRef.kind`. Needs TwilioCarrier and
 * TelnyxCarrier (src/layers.ts provides them; the call-control entry endpoint shares the same
 * TelnyxTwimlRunner, whose running TwiML translations it moves along).
 */
export const CarriersLive = Layer.effect(
  Carriers,
  Effect.gen(function* () {
    const twilio = yield* TwilioCarrier
    const telnyx = yield* TelnyxCarrier
    const carrierOf = (call: Pick<CallRef, "kind">) => (call.kind === "twilio" ? twilio : telnyx)
    return Carriers.of({
      hangup: (call) => carrierOf(call).hangup(call),
      transfer: (call, to, callerId, tracking) => carrierOf(call).transfer(call, to, callerId, tracking),
      applyTwiml: (call, twiml) => carrierOf(call).applyTwiml(call, twiml),
      place: (dial) => carrierOf(dial).place(dial),
      cancel: (call) => carrierOf(call).cancel(call)
    })
  })
)
