import { Effect, Either, Option, Schema } from "effect"
import { AfterStream } from "../../recovery/AfterStream.js"
import { TransferOutcomes } from "../../sessions/TransferOutcomes.js"
import { CarrierCallEvent, CarrierCallEvents } from "../../livecall/CarrierCallEvents.js"
import { publicWsUrl, type TelnyxVerifier } from "../CarrierSignatures.js"
import { sessionIdOfClientState, TelnyxCallCommands } from "../../carriers/TelnyxCallCommands.js"
import { TelnyxCarrier } from "../../carriers/TelnyxCarrier.js"
import { TelnyxTwimlRunner } from "../../carriers/TelnyxTwimlRunner.js"
import { admitCall, decodeEntry, telnyxSigned, withCustomParameters } from "./CallAdmission.js"
import { EntryBackgroundWork } from "./EntryBackgroundWork.js"
import { rescueAtEntry } from "./EntryFallback.js"
import type { ErrorFallback } from "../../fallback/ErrorFallback.js"
import type { SessionEndJournal } from "../../sessions/SessionEndJournal.js"
import { EntryPaths } from "../../kernel/EntryPaths.js"
import { SessionTokens } from "../SessionTokens.js"
import { DEFAULT_TELNYX_STREAM_CODEC } from "../../kernel/TelnyxStreamCodec.js"
import type { CarrierShape } from "../../kernel/Carrier.js"
import {
  CallControlCallPayload,
  CallControlWebhook,
  directionOf,
  entryCustomParameters,
  EntryQuery,
  type EntryRequest,
  type EntryResponse
} from "./EntryWire.js"

/** Telnyx's answering-machine detection webhooks, by the stage they report. */
const MACHINE_EVENTS: Readonly<Record<string, "detection" | "greeting">> = {
  "call.machine.detection.ended": "detection",
  "call.machine.premium.detection.ended": "detection",
  "call.machine.greeting.ended": "greeting",
  "call.machine.premium.greeting.ended": "greeting"
}

const MachineDetectionPayload = Schema.Struct({
  call_control_id: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256)),
  result: Schema.optional(Schema.NullOr(Schema.String.pipe(Schema.maxLength(64))))
})

/** The reference of the stream at `streamUrl` (SessionInfo.streamRef): the id of the session token in its query; undefined when it has none of callgate's. */
const streamRefOf = (tokens: SessionTokens, streamUrl: string | null | undefined): string | undefined => {
  if (typeof streamUrl !== "string" || streamUrl.length === 0) return undefined
  try {
    const token = new URL(streamUrl).searchParams.get("token")
    return token === null ? undefined : Option.getOrUndefined(tokens.referenceOf(token))
  } catch {
    return undefined
  }
}

const json = (status: number, body: unknown): EntryResponse => ({ status, contentType: "application/json", body: JSON.stringify(body) })
const received = json(200, { received: true })
const error = (status: number, code: string, message: string) => json(status, { error: { code, message, details: [] } })

/**
 * `POST /telephony/telnyx/call-control?agentId=..&environmentId=..`, a Call Control application's
 * webhook URL. Every verified webhook is acknowledged with 200 at once; carrier commands run in
 * the background (Telnyx would otherwise resend the webhook while callgate waits on its own API).
 *
 * - call.initiated (incoming): token issued, then `answer` with a bidirectional RTP stream to
 *   wss://PLACED/telephony/telnyx/stream?token=.. (the placed instance) (stream_auth_token = the token); an unknown
 *   environment gets `reject`.
 * - call.answered (outgoing): the same stream through `streaming_start`.
 * - call.hangup: CarrierCallEvents.CallHungUp, so the session ends.
 * - streaming.stopped / streaming.failed: the stream ended; its `client_state` (the session id,
 *   set on the stream's start) names the session, which AfterStream looks at: ended properly,
 *   nothing more; still active after the owner's grace (its instance died), claimed once and the
 *   caller rescued through the REST API (docs/reliability.md, "Instance loss").
 * - call.speak.ended / call.playback.ended: moves a running TwiML translation along.
 * - call.machine[.premium].detection.ended / greeting.ended: CarrierCallEvents.MachineDetected,
 *   the answering-machine verdict of an outbound call callgate placed (OutboundCalls).
 * - anything else: acknowledged and ignored.
 *
 * 401 for a bad or missing Ed25519 signature (when TELNYX_PUBLIC_KEY is set), 400 for a body
 * that is not a Call Control event, 503 when the store cannot be read (Telnyx retries).
 */
export const telnyxCallControlEntry = (
  request: EntryRequest,
  verify: TelnyxVerifier
) =>
  Effect.gen(function* () {
    if (!(yield* telnyxSigned(verify, request, "telnyx call-control webhook refused"))) return error(401, "UNAUTHORIZED", "The webhook signature is not valid.")
    const webhook = yield* Effect.either(decodeEntry(CallControlWebhook, request.body))
    if (Either.isLeft(webhook)) return error(400, "VALIDATION_FAILED", `Not a Call Control event: ${webhook.left}.`)
    const event = webhook.right.data.event_type
    const handled = ["call.initiated", "call.answered", "call.hangup", "call.speak.ended", "call.playback.ended", "streaming.stopped", "streaming.failed"]
    const machine = MACHINE_EVENTS[event]
    if (machine !== undefined) {
      // Answering-machine detection of an outbound call callgate placed (OutboundCalls acts on it).
      const detected = yield* Effect.either(decodeEntry(MachineDetectionPayload, webhook.right.data.payload))
      if (Either.isLeft(detected)) return error(400, "VALIDATION_FAILED", `The ${event} payload is not valid: ${detected.left}.`)
      const events = yield* CarrierCallEvents
      yield* events.publish(
        CarrierCallEvent.MachineDetected({ callId: detected.right.call_control_id, stage: machine, result: detected.right.result ?? "not_sure" })
      )
      return received
    }
    if (!handled.includes(event)) return received
    const decoded = yield* Effect.either(decodeEntry(CallControlCallPayload, webhook.right.data.payload))
    if (Either.isLeft(decoded)) return error(400, "VALIDATION_FAILED", `The ${event} payload is not valid: ${decoded.left}.`)
    const payload = decoded.right
    const callId = payload.call_control_id
    const runner = yield* TelnyxTwimlRunner

    switch (event) {
      case "call.hangup": {
        yield* runner.callProgress(callId, "hangup")
        const events = yield* CarrierCallEvents
        yield* events.publish(CarrierCallEvent.CallHungUp({ callId, cause: payload.hangup_cause ?? undefined }))
        // A caller on the way back from a failed transfer (no stream yet: no live call hears this) ends it.
        const query = yield* Effect.either(decodeEntry(EntryQuery, request.query))
        const sessionId = sessionIdOfClientState(payload.client_state)
        if (Either.isRight(query) && sessionId !== undefined) {
          yield* (yield* TransferOutcomes).callerLeft({ agentId: query.right.agentId, sessionId })
        }
        return received
      }
      case "call.speak.ended":
        yield* runner.callProgress(callId, "speak.ended")
        return received
      case "call.playback.ended":
        yield* runner.callProgress(callId, "playback.ended")
        return received
      case "streaming.stopped":
      case "streaming.failed": {
        const query = yield* Effect.either(decodeEntry(EntryQuery, request.query))
        const sessionId = sessionIdOfClientState(payload.client_state)
        // A stream callgate did not start (no client_state of ours) is not callgate's to act on.
        if (Either.isLeft(query) || sessionId === undefined) return received
        const afterStream = yield* AfterStream
        // The stream that ended, named by the token in its URL (an old stream of a call that moved is ignored).
        const stoppedStream = streamRefOf(yield* SessionTokens, payload.stream_url ?? payload.stream_params?.stream_url)
        const returning = afterStream
          .answer({
            stoppedStream,
            agentId: query.right.agentId,
            environmentId: query.right.environmentId,
            sessionId,
            call: { kind: "telnyx-call-control", callId, accountSid: payload.connection_id ?? undefined },
            // Stream events name no parties; a session with no record at all was an inbound call.
            from: payload.from ?? null,
            to: payload.to ?? null,
            direction: "inbound"
          })
          .pipe(
            Effect.tap((outcome) => (outcome === "rescued" ? Effect.logWarning("rescued a Call Control call whose stream stopped", { event, callId }) : Effect.void))
          )
        // Acknowledged at once; the look (up to the owner's grace) and any rescue run in the background.
        yield* (yield* EntryBackgroundWork).start(returning)
        return received
      }
    }

    // call.initiated (incoming) or call.answered (outgoing): a call that needs its stream.
    const direction = directionOf(payload.direction ?? undefined)
    if ((event === "call.initiated") !== (direction === "inbound")) return received
    const query = yield* Effect.either(decodeEntry(EntryQuery, request.query))
    if (Either.isLeft(query)) return error(400, "VALIDATION_FAILED", `The webhook URL's query is not valid: ${query.left}.`)
    const custom = entryCustomParameters(request.query)
    if ("problem" in custom) {
      yield* Effect.logWarning("telnyx call-control webhook refused: malformed", { problem: `query: ${custom.problem}` })
      return error(400, "VALIDATION_FAILED", `The webhook URL's query is not valid: ${custom.problem}.`)
    }
    const admission = yield* admitCall({
      agentId: query.right.agentId,
      environmentId: query.right.environmentId,
      kind: "telnyx-call-control",
      callId,
      from: payload.from ?? undefined,
      to: payload.to ?? undefined,
      direction,
      accountSid: payload.connection_id ?? undefined,
      ...withCustomParameters(custom.parameters),
      ...(query.right.sessionId !== undefined ? { sessionId: query.right.sessionId } : {})
    })
    if (admission._tag === "Unavailable") return error(503, "UNAVAILABLE", "The store is unavailable; retry later.")
    if (admission._tag === "OverLimit" || admission._tag === "Shed") {
      // Over the environment's limit (docs/scaling.md) or shed by its open breaker (docs/fallback.md): the error fallback acts on the call through Call Control.
      // The call is still ringing: Telnyx transfers or hangs up a ringing call, but speaks and plays
      // only on an answered one, so the fallback webhook's markup runs on the call answered first.
      const carrier = yield* TelnyxCarrier
      const commands = yield* TelnyxCallCommands
      const ringing: CarrierShape = {
        ...carrier,
        applyTwiml: (call, twiml) => Effect.zipRight(commands.answer(call.callId, admission.sessionId), carrier.applyTwiml(call, twiml))
      }
      const over = rescueAtEntry(
        {
          agentId: query.right.agentId,
          environmentId: query.right.environmentId,
          sessionId: admission.sessionId,
          call: { kind: "telnyx-call-control", callId },
          from: payload.from ?? null,
          to: payload.to ?? null,
          direction
        },
        admission,
        direction === "inbound" ? ringing : carrier,
        "rest"
      )
      const context = yield* Effect.context<ErrorFallback | SessionEndJournal>()
      yield* (yield* EntryBackgroundWork).start(Effect.provide(over, context))
      return received
    }
    // Read only when admitted (an unknown environment gets no stream).
    const stream =
      admission._tag === "Admitted"
        ? {
            url: `${admission.streamBase}${EntryPaths.telnyxStream}?token=${encodeURIComponent(admission.token)}`,
            token: admission.token,
            sessionId: admission.sessionId,
            codec: admission.telnyxStreamCodec
          }
        : { url: "", token: "", sessionId: "", codec: DEFAULT_TELNYX_STREAM_CODEC }
    const telnyx = yield* TelnyxCarrier
    const commands = yield* TelnyxCallCommands
    const command =
      admission._tag === "UnknownEnvironment"
        ? direction === "inbound"
          ? commands.reject(callId)
          : telnyx.hangup({ kind: "telnyx-call-control", callId })
        : direction === "inbound"
          ? commands.answerWithStream(callId, stream)
          : commands.startStream(callId, stream)
    // Failures are logged by the carrier adapter; nothing more can be done for this call here.
    yield* (yield* EntryBackgroundWork).start(Effect.ignore(command))
    return received
  }).pipe(Effect.annotateLogs("route", EntryPaths.telnyxCallControl))
