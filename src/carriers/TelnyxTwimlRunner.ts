import { Deferred, Duration, Effect, Either, Exit, FiberMap } from "effect"
import type { CarrierError } from "../kernel/Carrier.js"
import { TelnyxRest } from "./TelnyxRest.js"
import type { CallControlCommand } from "../twiml/TwimlCallControl.js"

/** Call Control events that move a running TwiML translation along (see TwimlCallControl). */
export type CallProgress = "speak.ended" | "playback.ended" | "hangup"

/** Longest wait for call.playback.ended before the next verb runs anyway. */
const PLAYBACK_WAIT_CAP = Duration.minutes(2)
/** Speech runs at roughly 10-15 characters a second; waits are capped in case the event is lost. */
const speakWait = (payload: string) => Duration.millis(Math.min(5_000 + payload.length * 100, 120_000))

/**
 * Runs translated TwiML documents on Telnyx Call Control calls, which have no markup interpreter:
 * one command after another, waiting for call.speak.ended / call.playback.ended (reported by the
 * Call Control webhook through `callProgress`) between them. One document per call; a new order
 * for the call, or its hangup, supersedes the running one.
 */
export class TelnyxTwimlRunner extends Effect.Service<TelnyxTwimlRunner>()("callgate/TelnyxTwimlRunner", {
  scoped: Effect.gen(function* () {
    const rest = yield* TelnyxRest

    /** Running TwiML translations, one per call; interrupted when the call ends or gets a new order. */
    const sequences = yield* FiberMap.make<string>()
    /** The call.speak.ended / call.playback.ended a sequence waits for, per call. */
    const waiting = new Map<string, { readonly event: CallProgress; readonly done: Deferred.Deferred<void> }>()

    const runCommand = (callControlId: string, step: CallControlCommand): Effect.Effect<void, CarrierError> => {
      switch (step._tag) {
        case "Speak":
          return rest.command("speak", callControlId, (actions, command_id, signal) =>
            actions.speak(
              callControlId,
              { payload: step.payload, voice: step.voice, ...(step.language ? { language: step.language as never } : {}), command_id },
              { signal }
            )
          )
        case "Play":
          return rest.command("playback_start", callControlId, (actions, command_id, signal) =>
            actions.startPlayback(callControlId, { audio_url: step.audioUrl, ...(step.loop !== undefined ? { loop: step.loop } : {}), command_id }, { signal })
          )
        case "Wait":
          return Effect.sleep(Duration.seconds(step.seconds))
        case "Transfer":
          return rest.transfer(callControlId, step.to, step.from, step.timeoutSecs)
        case "Hangup":
          return rest.hangup(callControlId)
      }
    }

    /** Runs one command and, for speech and playback, waits until Telnyx reports it finished. */
    const runAndSettle = (callControlId: string, step: CallControlCommand) => {
      const awaited: CallProgress | undefined = step._tag === "Speak" ? "speak.ended" : step._tag === "Play" ? "playback.ended" : undefined
      if (awaited === undefined) return Effect.as(runCommand(callControlId, step), Effect.void)
      return Effect.gen(function* () {
        // Registered before the command is sent: the webhook can beat the command's own response.
        const done = yield* Deferred.make<void>()
        waiting.set(callControlId, { event: awaited, done })
        yield* runCommand(callControlId, step)
        return Deferred.await(done).pipe(
          Effect.timeout(step._tag === "Speak" ? speakWait(step.payload) : PLAYBACK_WAIT_CAP),
          Effect.ignore,
          Effect.ensuring(Effect.sync(() => waiting.get(callControlId)?.done === done && waiting.delete(callControlId)))
        )
      })
    }

    /**
     * Starts the translated document: resolves once the first carrier request is accepted (so the
     * caller learns at once whether the carrier took it); the rest runs in the background. A later
     * failure hangs the call up, so it never stays open with nobody on it.
     */
    const run = (callControlId: string, commands: ReadonlyArray<CallControlCommand>) =>
      Effect.gen(function* () {
        const firstAccepted = yield* Deferred.make<void, CarrierError>()
        const program = Effect.gen(function* () {
          let settled = false
          for (const step of commands) {
            const next = yield* Effect.either(runAndSettle(callControlId, step))
            if (Either.isLeft(next)) {
              if (!settled) return yield* Deferred.fail(firstAccepted, next.left)
              yield* Effect.logWarning("telnyx: a TwiML verb failed mid-document; hanging up", { callId: callControlId, detail: next.left.detail })
              yield* Effect.ignore(rest.hangup(callControlId))
              return
            }
            if (step._tag !== "Wait" && !settled) {
              settled = true
              yield* Deferred.succeed(firstAccepted, undefined)
            }
            yield* next.right
          }
          yield* Deferred.succeed(firstAccepted, undefined)
        }).pipe(
          // Superseded (a newer order, or the call hung up) before anything was sent: nothing to report.
          Effect.onExit((exit) => (Exit.isInterrupted(exit) ? Deferred.succeed(firstAccepted, undefined) : Effect.void))
        )
        yield* FiberMap.run(sequences, callControlId, program)
        return yield* Deferred.await(firstAccepted)
      })

    /** Any new order for a call supersedes a TwiML document still playing on it. */
    const cancel = (callId: string) => FiberMap.remove(sequences, callId)

    /** Call Control webhooks report progress here: playback/speech finished, or the call ended. */
    const callProgress = (callControlId: string, event: CallProgress) =>
      event === "hangup"
        ? cancel(callControlId)
        : Effect.suspend(() => {
            const waiter = waiting.get(callControlId)
            return waiter !== undefined && waiter.event === event ? Deferred.succeed(waiter.done, undefined) : Effect.void
          })

    return { run, cancel, callProgress } as const
  })
}) {}
