import { Effect, Either } from "effect"
import { isE164 } from "../environments/EnvironmentSchema.js"
import { type CallRef, CarrierError, type CarrierShape } from "../kernel/Carrier.js"
import { TelnyxRest } from "./TelnyxRest.js"
import { TelnyxTwimlRunner } from "./TelnyxTwimlRunner.js"
import { translateTwiml } from "../twiml/TwimlCallControl.js"
import { dialTwiml } from "../twiml/TwimlBuilder.js"

/**
 * The Telnyx side of the `Carriers` port: TeXML calls get TeXML call updates (Status, Texml);
 * Call Control calls get commands (hangup, transfer) and translated TwiML (TelnyxTwimlRunner).
 */
export class TelnyxCarrier extends Effect.Service<TelnyxCarrier>()("callgate/TelnyxCarrier", {
  effect: Effect.gen(function* () {
    const rest = yield* TelnyxRest
    const runner = yield* TelnyxTwimlRunner

    const hangup = (call: CallRef) =>
      call.kind === "telnyx-call-control"
        ? Effect.zipRight(runner.cancel(call.callId), rest.hangup(call.callId))
        : rest.texmlUpdate("hangup", call, { Status: "completed" }, true)

    const transfer = (call: CallRef, to: string, callerId?: string) => {
      if (!isE164(to)) {
        return Effect.fail(new CarrierError({ provider: "telnyx", operation: "transfer", detail: "the destination is not an E.164 number", retryable: false }))
      }
      const from = callerId !== undefined && isE164(callerId) ? callerId : undefined
      return call.kind === "telnyx-call-control"
        ? Effect.zipRight(runner.cancel(call.callId), rest.transfer(call.callId, to, from))
        : rest.texmlUpdate("transfer", call, { Texml: dialTwiml(to, from) }, false)
    }

    const applyTwiml = (call: CallRef, twiml: string): Effect.Effect<void, CarrierError> => {
      if (call.kind !== "telnyx-call-control") return rest.texmlUpdate("applyTwiml", call, { Texml: twiml }, false)
      const translated = translateTwiml(twiml)
      if (Either.isLeft(translated)) {
        return Effect.fail(
          new CarrierError({ provider: "telnyx", operation: "applyTwiml", detail: translated.left.reason, retryable: false, unexpected: true })
        )
      }
      return Effect.zipRight(runner.cancel(call.callId), runner.run(call.callId, translated.right))
    }

    return { hangup, transfer, applyTwiml } as const satisfies CarrierShape
  })
}) {}
