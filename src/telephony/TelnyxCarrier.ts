import { randomUUID } from "node:crypto"
import { Deferred, Duration, Effect, Either, Exit, FiberMap, Option, Redacted } from "effect"
import Telnyx, { APIConnectionTimeoutError, APIError } from "telnyx"
import { AppConfig } from "../config/AppConfig.js"
import { isE164 } from "../environments/EnvironmentSchema.js"
import { Metrics } from "../observability/Metrics.js"
import { type CallRef, CarrierError, type CarrierShape } from "../core/Carrier.js"
import {
  carrierInstruments,
  type ClassifiedFailure,
  classifyNetworkFailure,
  classifyStatus,
  clip,
  runCarrierRequest
} from "./CarrierRequest.js"
import { type CallControlCommand, translateTwiml } from "./TwimlCallControl.js"
import { dialTwiml } from "./TwilioCarrier.js"

/** Telnyx's "Call has already ended" (HTTP 422). */
const CALL_ENDED_CODES = new Set(["90018"])
const CALL_ENDED_TEXT = /already ended|no longer active|call is not active|has ended/i

/** How a bidirectional RTP media stream to callgate is requested (PCMU both ways). */
export interface StreamTarget {
  /** wss://.../telephony/telnyx/stream?token=... */
  readonly url: string
  /** The session token, also sent as the stream's auth token. */
  readonly token: string
}

/** Call Control events that move a running TwiML translation along (see TwimlCallControl). */
export type CallProgress = "speak.ended" | "playback.ended" | "hangup"

/** Longest wait for call.playback.ended before the next verb runs anyway. */
const PLAYBACK_WAIT_CAP = Duration.minutes(2)
/** Speech runs at roughly 10-15 characters a second; waits are capped in case the event is lost. */
const speakWait = (payload: string) => Duration.millis(Math.min(5_000 + payload.length * 100, 120_000))

const classifyTelnyxFailure = (error: unknown): ClassifiedFailure => {
  if (error instanceof APIConnectionTimeoutError) return classifyNetworkFailure(error, true)
  if (!(error instanceof APIError) || error.status === undefined) return classifyNetworkFailure(error)
  const status = error.status
  const errors = (error.error as { errors?: ReadonlyArray<{ code?: unknown; title?: unknown; detail?: unknown }> } | undefined)?.errors
  const first = Array.isArray(errors) ? errors[0] : undefined
  const detail = first
    ? `${first.code !== undefined ? `error ${String(first.code)}: ` : ""}${clip(first.title)}${first.detail !== undefined ? ` (${clip(first.detail)})` : ""}`
    : `HTTP ${status}`
  const ended =
    status === 404 ||
    (status === 422 &&
      (errors ?? []).some((e) => CALL_ENDED_CODES.has(String(e.code)) || CALL_ENDED_TEXT.test(`${String(e.title)} ${String(e.detail)}`)))
  return ended ? { kind: "ended", status, detail } : classifyStatus(status, detail)
}

/**
 * The Telnyx side of the `Carriers` port, through the telnyx SDK, plus the Call Control commands
 * the entry endpoints need (answer with a stream, reject). Call Control commands carry a
 * command_id, which Telnyx deduplicates, so they are safe to repeat; TeXML call updates are not.
 */
export class TelnyxCarrier extends Effect.Service<TelnyxCarrier>()("callgate/TelnyxCarrier", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const instruments = carrierInstruments((yield* Metrics).registry)
    const client = Option.map(
      config.telnyxApiKey,
      (apiKey) =>
        new Telnyx({
          apiKey: Redacted.value(apiKey),
          publicKey: null,
          clientID: null,
          clientSecret: null,
          baseURL: config.telnyxApiBaseUrl,
          // Retries are ours (CarrierRequest), so every attempt is counted and bounded.
          maxRetries: 0,
          timeout: Duration.toMillis(config.carrierRequestTimeout),
          logLevel: "off"
        })
    )
    if (Option.isNone(client)) yield* Effect.logInfo("Telnyx REST is disabled: TELNYX_API_KEY is not set")

    /** Running TwiML translations, one per call; interrupted when the call ends or gets a new order. */
    const sequences = yield* FiberMap.make<string>()
    /** The call.speak.ended / call.playback.ended a sequence waits for, per call. */
    const waiting = new Map<string, { readonly event: CallProgress; readonly done: Deferred.Deferred<void> }>()

    const request = (operation: string, callId: string, idempotent: boolean, send: (sdk: Telnyx, signal: AbortSignal) => Promise<unknown>) =>
      Option.match(client, {
        onNone: () =>
          Effect.fail(new CarrierError({ provider: "telnyx", operation, detail: "not configured: TELNYX_API_KEY is not set", retryable: false })),
        onSome: (sdk) =>
          runCarrierRequest(instruments, {
            provider: "telnyx",
            operation,
            callId,
            idempotent,
            attempt: Effect.tryPromise({ try: (signal) => send(sdk, signal), catch: classifyTelnyxFailure })
          })
      })

    /** One Call Control command; the command_id makes a repeated attempt a no-op at Telnyx. */
    const command = (operation: string, callControlId: string, send: (actions: Telnyx["calls"]["actions"], commandId: string, signal: AbortSignal) => Promise<unknown>) => {
      const commandId = randomUUID()
      return request(operation, callControlId, true, (sdk, signal) => send(sdk.calls.actions, commandId, signal))
    }

    const texmlUpdate = (operation: string, call: CallRef, params: { Status?: string; Texml?: string }, idempotent: boolean) =>
      call.accountSid === undefined || call.accountSid === ""
        ? Effect.fail(new CarrierError({ provider: "telnyx", operation, detail: "the TeXML call has no account id", retryable: false }))
        : request(operation, call.callId, idempotent, (sdk, signal) =>
            sdk.texml.accounts.calls.update(call.callId, { account_sid: call.accountSid!, ...params }, { signal })
          )

    const runCommand = (callControlId: string, step: CallControlCommand): Effect.Effect<void, CarrierError> => {
      switch (step._tag) {
        case "Speak":
          return command("speak", callControlId, (actions, command_id, signal) =>
            actions.speak(callControlId, { payload: step.payload, voice: step.voice, ...(step.language ? { language: step.language as never } : {}), command_id }, { signal })
          )
        case "Play":
          return command("playback_start", callControlId, (actions, command_id, signal) =>
            actions.startPlayback(callControlId, { audio_url: step.audioUrl, ...(step.loop !== undefined ? { loop: step.loop } : {}), command_id }, { signal })
          )
        case "Wait":
          return Effect.sleep(Duration.seconds(step.seconds))
        case "Transfer":
          return callControlTransfer(callControlId, step.to, step.from, step.timeoutSecs)
        case "Hangup":
          return callControlHangup(callControlId)
      }
    }

    const callControlHangup = (callControlId: string) =>
      command("hangup", callControlId, (actions, command_id, signal) => actions.hangup(callControlId, { command_id }, { signal }))

    const callControlTransfer = (callControlId: string, to: string, from?: string, timeoutSecs?: number) =>
      command("transfer", callControlId, (actions, command_id, signal) =>
        actions.transfer(
          callControlId,
          { to, ...(from !== undefined ? { from } : {}), ...(timeoutSecs !== undefined ? { timeout_secs: timeoutSecs } : {}), command_id },
          { signal }
        )
      )

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
    const runSequence = (callControlId: string, commands: ReadonlyArray<CallControlCommand>) =>
      Effect.gen(function* () {
        const firstAccepted = yield* Deferred.make<void, CarrierError>()
        const program = Effect.gen(function* () {
          let settled = false
          for (const step of commands) {
            const next = yield* Effect.either(runAndSettle(callControlId, step))
            if (Either.isLeft(next)) {
              if (!settled) return yield* Deferred.fail(firstAccepted, next.left)
              yield* Effect.logWarning("telnyx: a TwiML verb failed mid-document; hanging up", { callId: callControlId, detail: next.left.detail })
              yield* Effect.ignore(callControlHangup(callControlId))
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
    const cancelSequence = (callId: string) => FiberMap.remove(sequences, callId)

    const hangup = (call: CallRef) =>
      call.kind === "telnyx-call-control"
        ? Effect.zipRight(cancelSequence(call.callId), callControlHangup(call.callId))
        : texmlUpdate("hangup", call, { Status: "completed" }, true)

    const transfer = (call: CallRef, to: string, callerId?: string) => {
      if (!isE164(to)) {
        return Effect.fail(new CarrierError({ provider: "telnyx", operation: "transfer", detail: "the destination is not an E.164 number", retryable: false }))
      }
      const from = callerId !== undefined && isE164(callerId) ? callerId : undefined
      return call.kind === "telnyx-call-control"
        ? Effect.zipRight(cancelSequence(call.callId), callControlTransfer(call.callId, to, from))
        : texmlUpdate("transfer", call, { Texml: dialTwiml(to, from) }, false)
    }

    const applyTwiml = (call: CallRef, twiml: string): Effect.Effect<void, CarrierError> => {
      if (call.kind !== "telnyx-call-control") return texmlUpdate("applyTwiml", call, { Texml: twiml }, false)
      const translated = translateTwiml(twiml)
      if (Either.isLeft(translated)) {
        return Effect.fail(
          new CarrierError({ provider: "telnyx", operation: "applyTwiml", detail: translated.left.reason, retryable: false, unexpected: true })
        )
      }
      return Effect.zipRight(cancelSequence(call.callId), runSequence(call.callId, translated.right))
    }

    /** Answers an incoming Call Control call with a bidirectional RTP (PCMU) stream to callgate. */
    const answerWithStream = (callControlId: string, stream: StreamTarget) =>
      command("answer", callControlId, (actions, command_id, signal) =>
        actions.answer(
          callControlId,
          {
            stream_url: stream.url,
            stream_track: "inbound_track",
            stream_bidirectional_mode: "rtp",
            stream_bidirectional_codec: "PCMU",
            // Sent by Telnyx on the stream's WebSocket; the SDK's answer type does not list it yet.
            ...({ stream_auth_token: stream.token } as object),
            command_id
          },
          { signal }
        )
      )

    /** Starts the same stream on an outbound call once it is answered. */
    const startStream = (callControlId: string, stream: StreamTarget) =>
      command("streaming_start", callControlId, (actions, command_id, signal) =>
        actions.startStreaming(
          callControlId,
          {
            stream_url: stream.url,
            stream_track: "inbound_track",
            stream_bidirectional_mode: "rtp",
            stream_bidirectional_codec: "PCMU",
            stream_auth_token: stream.token,
            command_id
          },
          { signal }
        )
      )

    /** Refuses a ringing call callgate cannot serve (unknown environment). */
    const reject = (callControlId: string) =>
      command("reject", callControlId, (actions, command_id, signal) => actions.reject(callControlId, { cause: "CALL_REJECTED", command_id }, { signal }))

    /** Call Control webhooks report progress here: playback/speech finished, or the call ended. */
    const callProgress = (callControlId: string, event: CallProgress) =>
      event === "hangup"
        ? cancelSequence(callControlId)
        : Effect.suspend(() => {
            const waiter = waiting.get(callControlId)
            return waiter !== undefined && waiter.event === event ? Deferred.succeed(waiter.done, undefined) : Effect.void
          })

    const port: CarrierShape = { hangup, transfer, applyTwiml }
    return { ...port, answerWithStream, startStream, reject, callProgress } as const
  })
}) {}
