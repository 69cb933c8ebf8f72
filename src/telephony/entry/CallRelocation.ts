import { Duration, Effect, Option } from "effect"
import { AppConfig } from "../../config/AppConfig.js"
import { PublicUrl } from "../../config/PublicUrl.js"
import { goneAfterMs, RESERVATION_HOLD_MS } from "../../fleet/FleetTiming.js"
import { InstanceRegistry } from "../../fleet/InstanceRegistry.js"
import { InstanceStore } from "../../fleet/InstanceStore.js"
import { type StreamTarget, TelnyxCallCommands } from "../../carriers/TelnyxCallCommands.js"
import { Sessions } from "../../sessions/Sessions.js"
import { Carriers } from "../../kernel/Carrier.js"
import { EntryPaths } from "../../kernel/EntryPaths.js"
import type { StoreError } from "../../kernel/StoreError.js"
import { CallMover, type CallMoverShape } from "../../livecall/CallMover.js"
import type { ResumedSession } from "../../kernel/CallLegs.js"
import type { SessionInfo } from "../../kernel/SessionInfo.js"
import { DEFAULT_TELNYX_STREAM_CODEC, type TelnyxStreamCodec, telnyxStreamCodecOf } from "../../kernel/TelnyxStreamCodec.js"
import { Environments } from "../../environments/Environments.js"
import { publicWsUrl } from "../CarrierSignatures.js"
import { SessionTokens } from "../SessionTokens.js"
import { joinStreamTwiml } from "./CallAdmission.js"

/** An idle dial-in agent socket held for a call, and where its instance takes streams. */
interface ReservedInstance {
  readonly id: string
  readonly publicUrl: string
  readonly socketId: string
}

/** An outer bound on the carrier's answer to the move (the adapters time their own requests out first). */
const MOVE_TIMEOUT = Duration.seconds(10)

/**
 * The CallMover adapter (docs/design.md, "The path of a failover", across instances): reserves an
 * idle dial-in agent of the call's environment on another live instance, exactly as placement
 * does for a new call (InstanceStore.reserve), issues the stream's single-use session token with
 * the session's id, that instance and socket, and `resumed`, and asks the carrier once for a
 * live-call update with a new `<Connect><Stream>` to that instance (Twilio and TeXML, built as
 * the call entry builds it). A Call Control call is moved with `streaming_start` to that instance
 * (its own token in the stream URL), then `streaming_stop` of the old stream by its `stream_id`;
 * the record says the stream is moving (`streamMovingTo`) before the old one stops, so the old
 * stream's `streaming.stopped` is not taken for an abandoned call (AfterStream).
 * `bringBack` reserves the same way for a caller back from an agent's transfer that was not
 * answered (docs/fallback.md, "The return path"), this instance first, and answers the markup.
 */
export class CallRelocation extends Effect.Service<CallRelocation>()("callgate/CallRelocation", {
  effect: Effect.gen(function* () {
    const config = yield* AppConfig
    const ttlMs = goneAfterMs(config)
    const publicUrl = yield* PublicUrl
    const store = yield* InstanceStore
    const registry = yield* InstanceRegistry
    const tokens = yield* SessionTokens
    const carriers = yield* Carriers
    const environments = yield* Environments
    const commands = yield* TelnyxCallCommands
    const sessions = yield* Sessions
    const self = registry.instanceId

    /**
     * The stream's single-use session token for `instance`: the session's id, that instance and
     * reserved socket, and `resumed`.
     */
    const streamToken = (info: SessionInfo, kind: "twilio" | "telnyx-texml" | "telnyx-call-control", instance: ReservedInstance, resumed: ResumedSession) =>
      tokens.issue({
        entrySessionId: info.sessionId,
        agentId: info.agentId,
        environmentId: info.environmentId,
        kind,
        callId: info.call.callId,
        direction: info.direction,
        ...(info.from !== null ? { from: info.from } : {}),
        ...(info.to !== null ? { to: info.to } : {}),
        ...(info.call.accountSid !== undefined ? { accountSid: info.call.accountSid } : {}),
        ...(info.customParameters !== undefined ? { customParameters: { ...info.customParameters } } : {}),
        placedOn: instance.id,
        agentSocket: instance.socketId,
        resumed,
        ...(info.recording !== undefined ? { recording: info.recording } : {})
      })

    /**
     * The `<Connect><Stream>` markup that sends the call's media to `instance` (its public URL) with
     * its token, a TeXML stream asked in `codec`. Built as the call entry builds it (Twilio, TeXML).
     */
    const streamMarkup = (
      info: SessionInfo,
      kind: "twilio" | "telnyx-texml",
      instance: ReservedInstance,
      resumed: ResumedSession,
      codec: TelnyxStreamCodec
    ): string => {
      const token = streamToken(info, kind, instance, resumed)
      return joinStreamTwiml(kind, { publicUrl: publicUrl.current(), fleetUrl: config.fleetUrl }, {
        streamBase: publicWsUrl(instance.publicUrl),
        token,
        agentId: info.agentId,
        environmentId: info.environmentId,
        sessionId: info.sessionId,
        from: info.from ?? undefined,
        to: info.to ?? undefined,
        direction: info.direction,
        telnyxStreamCodec: codec
      })
    }

    /**
     * The codec a TeXML stream is asked in again: the format the call streams in now, when this
     * instance carries it (a move: the agent keeps the audio it was given), else the environment's
     * telnyxStreamCodec (a caller back from a transfer, whose session was read from the store).
     */
    const codecFor = (info: SessionInfo): Effect.Effect<TelnyxStreamCodec> =>
      info.mediaFormat !== undefined
        ? Effect.succeed(telnyxStreamCodecOf(info.mediaFormat))
        : environments.get(info.agentId, info.environmentId).pipe(
            Effect.map((env) => env.telnyxStreamCodec),
            Effect.orElseSucceed(() => DEFAULT_TELNYX_STREAM_CODEC)
          )

    /** Holds an idle dial-in agent of the call's environment, `self` first; its instance's address, or None (none idle, or its instance is gone or draining). */
    const reserveAgent = (info: SessionInfo): Effect.Effect<Option.Option<ReservedInstance>, StoreError> =>
      Effect.gen(function* () {
        yield* registry.flush(info.agentId, info.environmentId)
        const reserved = yield* store.reserve(info.agentId, info.environmentId, self, RESERVATION_HOLD_MS, ttlMs)
        if (Option.isNone(reserved)) return Option.none<ReservedInstance>()
        const { instanceId, socketId } = reserved.value
        if (instanceId === self) return Option.some<ReservedInstance>({ id: self, publicUrl: publicUrl.current(), socketId })
        const entry = registry.known(instanceId)
        const live = Option.isSome(entry) ? entry : Option.fromNullable((yield* registry.instances).find((e) => e.id === instanceId))
        if (Option.isNone(live) || live.value.draining) return Option.none<ReservedInstance>()
        return Option.some<ReservedInstance>({ id: instanceId, publicUrl: live.value.publicUrl, socketId })
      })

    /** A Call Control stream to `instance` for `streaming_start`: its stream URL with its own token (as the entry's answer builds it). */
    const streamTo = (info: SessionInfo, instance: ReservedInstance, resumed: ResumedSession, codec: TelnyxStreamCodec): StreamTarget => {
      const token = streamToken(info, "telnyx-call-control", instance, resumed)
      const url = `${publicWsUrl(instance.publicUrl)}${EntryPaths.telnyxStream}?token=${encodeURIComponent(token)}`
      return { url, token, sessionId: info.sessionId, codec }
    }

    /**
     * Moves a Call Control call's stream to `instance`: `streaming_start` there (asked once; refused:
     * the call stays), the record marked `streamMovingTo` while the session still has this
     * instance's stream (a compare-and-set: the other instance may have taken it already), then
     * `streaming_stop` of this stream by its `stream_id`. A stop that fails is only logged: the new
     * stream runs, and this instance closes the old one as it lets the call go.
     */
    const moveStream = (info: SessionInfo, instance: ReservedInstance, resumed: ResumedSession, ready: Effect.Effect<void>) =>
      Effect.gen(function* () {
        const stream = streamTo(info, instance, resumed, yield* codecFor(info))
        yield* ready
        const started = yield* commands.startStream(info.call.callId, stream).pipe(Effect.timeout(MOVE_TIMEOUT), Effect.either)
        if (started._tag === "Left") {
          yield* Effect.logWarning("the carrier did not start the call's stream on another instance", { instanceId: instance.id, error: started.left.message })
          return Option.none<string>()
        }
        yield* sessions
          .update(info.agentId, info.sessionId, (current) =>
            current.status === "active" && current.streamRef === info.streamRef && current.instanceId === self ? { ...current, streamMovingTo: instance.id } : current
          )
          .pipe(Effect.catchAll((error) => Effect.logWarning("could not mark the session's stream as moving", { error: error.message })))
        const stopped = yield* commands.stopStream(info.call.callId, info.streamSid).pipe(Effect.timeout(MOVE_TIMEOUT), Effect.either)
        if (stopped._tag === "Left") {
          yield* Effect.logWarning("the carrier did not stop the call's old stream; it is closed here", { error: stopped.left.message })
        }
        return Option.some(instance.id)
      })

    const mover: CallMoverShape = {
      move: (info, resumed, ready) =>
        Effect.gen(function* () {
          const kind = info.call.kind
          const reserved = yield* reserveAgent(info)
          // None elsewhere, or the registry still lists one here: the failover waits on this instance.
          if (Option.isNone(reserved) || reserved.value.id === self) return Option.none()
          const instanceId = reserved.value.id
          if (kind === "telnyx-call-control") return yield* moveStream(info, reserved.value, resumed, ready)
          // A Twilio stream has no codec to ask for: no environment read on the way to the carrier.
          const codec = kind === "twilio" ? DEFAULT_TELNYX_STREAM_CODEC : yield* codecFor(info)
          const twiml = streamMarkup(info, kind, reserved.value, resumed, codec)
          yield* ready
          const asked = yield* carriers.applyTwiml(info.call, twiml).pipe(Effect.timeout(MOVE_TIMEOUT), Effect.either)
          if (asked._tag === "Left") {
            yield* Effect.logWarning("the carrier did not move the call's stream to another instance", {
              instanceId,
              error: asked.left.message
            })
            return Option.none()
          }
          return Option.some(instanceId)
        }).pipe(
          Effect.catchAll((error) =>
            Effect.as(Effect.logWarning("the call could not be moved to another instance", { error: error.message }), Option.none<string>())
          )
        )
    }

    /**
     * An idle dial-in agent reserved for a caller back from a transfer (this instance first), and
     * what sends the call to it (`build`, given the instance and the codec to ask for). None: no
     * agent is idle anywhere (or the store did not answer).
     */
    const reserveForReturn = <A>(info: SessionInfo, build: (instance: ReservedInstance, codec: TelnyxStreamCodec) => A): Effect.Effect<Option.Option<A>> =>
      Effect.zip(reserveAgent(info), codecFor(info)).pipe(
        Effect.map(([reserved, codec]) => Option.map(reserved, (instance) => build(instance, codec))),
        Effect.catchAll((error) =>
          Effect.as(Effect.logWarning("no agent could be reserved for the caller back from the transfer", { error: error.message }), Option.none<A>())
        )
      )

    /**
     * The caller back from an agent's transfer that was not answered (docs/fallback.md, "The
     * return path"): the answer to the `<Dial action>` is the `<Connect><Stream>` to the reserved
     * agent's instance, whose stream re-opens the session with `resumed`.
     */
    const bringBack = (
      info: SessionInfo,
      kind: "twilio" | "telnyx-texml",
      resumed: ResumedSession
    ): Effect.Effect<Option.Option<{ readonly instanceId: string; readonly twiml: string }>> =>
      reserveForReturn(info, (instance, codec) => ({ instanceId: instance.id, twiml: streamMarkup(info, kind, instance, resumed, codec) }))

    /**
     * `bringBack` for a Call Control call, whose caller's leg stays up when a transfer fails
     * (Telnyx: "the original call will remain active and may be issued additional commands"): the
     * stream for `streaming_start` on that leg, to the reserved agent's instance, with its token.
     */
    const bringBackStream = (
      info: SessionInfo,
      resumed: ResumedSession
    ): Effect.Effect<Option.Option<{ readonly instanceId: string; readonly stream: StreamTarget }>> =>
      reserveForReturn(info, (instance, codec) => ({ instanceId: instance.id, stream: streamTo(info, instance, resumed, codec) }))
    ;(yield* CallMover).install(mover)
    return { move: mover.move, bringBack, bringBackStream } as const
  })
}) {}
