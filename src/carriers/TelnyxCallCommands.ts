import { randomUUID } from "node:crypto"
import { Effect } from "effect"
import { CarrierError } from "../kernel/Carrier.js"
import { isSessionId } from "../kernel/SessionInfo.js"
import { callControlCodecFields, type TelnyxStreamCodec } from "../kernel/TelnyxStreamCodec.js"
import { TelnyxRest } from "./TelnyxRest.js"

/** How a bidirectional RTP media stream to callgate is requested (in `codec` both ways). */
export interface StreamTarget {
  /** wss://.../telephony/telnyx/stream?token=... */
  readonly url: string
  /** The session token, also sent as the stream's auth token. */
  readonly token: string
  /**
   * The call's session id, set as the call's `client_state` (base64, as Telnyx requires): every
   * later webhook of the call carries it, so `streaming.stopped` names its session (docs/reliability.md).
   */
  readonly sessionId: string
  /** The environment's telnyxStreamCodec: what Telnyx streams and what callgate sends back. */
  readonly codec: TelnyxStreamCodec
}

/** A session id as Call Control's `client_state` (base64 text). */
export const clientStateOf = (sessionId: string) => Buffer.from(sessionId, "utf8").toString("base64")

/** The session id back out of a webhook's `client_state`; undefined when it carries none or something else. */
export const sessionIdOfClientState = (clientState: string | null | undefined): string | undefined => {
  if (typeof clientState !== "string" || clientState.length === 0 || clientState.length > 128) return undefined
  const text = Buffer.from(clientState, "base64").toString("utf8")
  return isSessionId(text) ? text : undefined
}

/**
 * The Call Control commands that bring a call to callgate's media stream: answer an incoming call
 * with the stream, start it on an answered outgoing call, or reject a call callgate cannot serve.
 */
/** What answer and streaming_start both send: callgate's stream (RTP both ways, in the environment's codec), its auth token, and the session. */
const streamFields = (stream: StreamTarget) => ({
  stream_url: stream.url,
  stream_track: "inbound_track" as const,
  stream_bidirectional_mode: "rtp" as const,
  ...callControlCodecFields(stream.codec),
  stream_auth_token: stream.token,
  client_state: clientStateOf(stream.sessionId)
})

export class TelnyxCallCommands extends Effect.Service<TelnyxCallCommands>()("callgate/TelnyxCallCommands", {
  effect: Effect.gen(function* () {
    const rest = yield* TelnyxRest

    /** Answers an incoming Call Control call with a bidirectional RTP stream to callgate. */
    // stream_auth_token is sent by Telnyx on the stream's WebSocket; the SDK's answer type does not list it yet.
    const answerWithStream = (callControlId: string, stream: StreamTarget) =>
      rest.command("answer", callControlId, (actions, command_id, signal) => actions.answer(callControlId, { ...streamFields(stream), command_id }, { signal }))

    /** Starts the same stream on an outbound call once it is answered. */
    const startStream = (callControlId: string, stream: StreamTarget) =>
      rest.command("streaming_start", callControlId, (actions, command_id, signal) => actions.startStreaming(callControlId, { ...streamFields(stream), command_id }, { signal }))

    /**
     * Stops one stream of the call, by the `stream_id` Telnyx gave it (its `start` frame): without
     * it Telnyx would stop every stream of the call, the new one of a move too.
     */
    const stopStream = (callControlId: string, streamId: string) =>
      rest.command("streaming_stop", callControlId, (actions, command_id, signal) =>
        actions.stopStreaming(callControlId, { stream_id: streamId, command_id }, { signal })
      )

    /**
     * Answers an incoming call with no stream: a call the entry rescues (shed by an open breaker,
     * or over the fleet-wide limit) whose fallback speaks or plays, which Telnyx runs only on an
     * answered call. `client_state` names the session, as on a streamed call.
     */
    const answer = (callControlId: string, sessionId: string) =>
      rest.command("answer", callControlId, (actions, command_id, signal) =>
        actions.answer(callControlId, { client_state: clientStateOf(sessionId), command_id }, { signal })
      )

    /** Refuses a ringing call callgate cannot serve (unknown environment). */
    const reject = (callControlId: string) =>
      rest.command("reject", callControlId, (actions, command_id, signal) => actions.reject(callControlId, { cause: "CALL_REJECTED", command_id }, { signal }))

    /**
     * Places an outbound call on the Call Control application `connectionId`; answers its
     * call_control_id. Telnyx reports progress (call.answered, call.hangup with its cause) to
     * `webhookUrl`, callgate's Call Control webhook, which starts the stream once it is answered.
     */
    const dial = (params: {
      readonly connectionId: string
      readonly to: string
      readonly from: string
      readonly webhookUrl: string
      readonly timeoutSecs: number
      readonly answeringMachineDetection?: "detect" | "greeting_end" | undefined
    }) =>
      rest
        .requestFor("dial", "", (sdk, signal) =>
          sdk.calls.dial(
            {
              connection_id: params.connectionId,
              to: params.to,
              from: params.from,
              webhook_url: params.webhookUrl,
              webhook_url_method: "POST",
              timeout_secs: params.timeoutSecs,
              ...(params.answeringMachineDetection !== undefined ? { answering_machine_detection: params.answeringMachineDetection } : {}),
              command_id: randomUUID()
            },
            { signal }
          )
        )
        .pipe(
          Effect.flatMap((answer) =>
            answer.data?.call_control_id !== undefined
              ? Effect.succeed(answer.data.call_control_id)
              : Effect.fail(new CarrierError({ provider: "telnyx", operation: "dial", detail: "the answer has no call_control_id", retryable: false }))
          )
        )

    return { answerWithStream, answer, startStream, stopStream, reject, dial } as const
  })
}) {}
