import { Effect, Either, Option } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { isE164 } from "../environments/EnvironmentSchema.js"
import { type CallRef, CarrierError, type CarriersShape, type OutboundDial, type TransferTracking } from "../kernel/Carrier.js"
import { TelnyxCallCommands } from "./TelnyxCallCommands.js"
import { TelnyxRest } from "./TelnyxRest.js"
import { TelnyxTwimlRunner } from "./TelnyxTwimlRunner.js"
import { translateTwiml } from "../twiml/TwimlCallControl.js"
import { dialTwiml } from "../twiml/TwimlBuilder.js"

/**
 * The Telnyx side of the `Carriers` port: TeXML calls get TeXML call updates (Status, Texml);
 * Call Control calls get commands (hangup, transfer) and translated TwiML (TelnyxTwimlRunner).
 * Outbound calls are placed as Call Control dials on TELNYX_CONNECTION_ID.
 */
export class TelnyxCarrier extends Effect.Service<TelnyxCarrier>()("callgate/TelnyxCarrier", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const rest = yield* TelnyxRest
    const runner = yield* TelnyxTwimlRunner
    const commands = yield* TelnyxCallCommands

    const hangup = (call: CallRef) =>
      call.kind === "telnyx-call-control"
        ? Effect.zipRight(runner.cancel(call.callId), rest.hangup(call.callId))
        : rest.texmlUpdate("hangup", call, { Status: "completed" }, true)

    const transfer = (call: CallRef, to: string, callerId?: string, tracking?: TransferTracking) => {
      if (!isE164(to)) {
        return Effect.fail(new CarrierError({ provider: "telnyx", operation: "transfer", detail: "the destination is not an E.164 number", retryable: false }))
      }
      const from = callerId !== undefined && isE164(callerId) ? callerId : undefined
      return call.kind === "telnyx-call-control"
        ? Effect.zipRight(
            runner.cancel(call.callId),
            rest.transfer(call.callId, to, from, tracking?.timeoutSeconds, tracking?.callControlEventsUrl)
          )
        : rest.texmlUpdate("transfer", call, { Texml: dialTwiml(to, from, tracking) }, false)
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

    const place = (dial: OutboundDial): Effect.Effect<CallRef, CarrierError> =>
      Option.match(config.telnyxConnectionId, {
        onNone: () => Effect.fail(new CarrierError({ provider: "telnyx", operation: "dial", detail: "not configured: TELNYX_CONNECTION_ID is not set", retryable: false })),
        onSome: (connectionId) =>
          commands
            .dial({
              connectionId,
              to: dial.to,
              from: dial.from,
              webhookUrl: dial.answerUrl,
              timeoutSecs: dial.timeoutSeconds,
              // greeting_end always reports the end of a machine's greeting (call.machine.greeting.ended).
              answeringMachineDetection:
                dial.machineDetection === undefined ? undefined : dial.machineDetection.mode === "detect" ? "detect" : "greeting_end"
            })
            .pipe(Effect.map((callControlId): CallRef => ({ kind: "telnyx-call-control", callId: callControlId })))
      })

    const cancel = (call: CallRef) =>
      call.kind === "telnyx-call-control" ? rest.hangup(call.callId) : rest.texmlUpdate("cancel", call, { Status: "canceled" }, true)

    return { hangup, transfer, applyTwiml, place, cancel } as const satisfies CarriersShape
  })
}) {}
