import { Duration, Effect, Option } from "effect"
import { AppConfig } from "../../config/AppConfig.js"
import { PublicUrl } from "../../config/PublicUrl.js"
import { goneAfterMs, RESERVATION_HOLD_MS } from "../../fleet/FleetTiming.js"
import { InstanceRegistry } from "../../fleet/InstanceRegistry.js"
import { InstanceStore } from "../../fleet/InstanceStore.js"
import { Carriers } from "../../kernel/Carrier.js"
import { CallMover, type CallMoverShape } from "../../livecall/CallMover.js"
import { publicWsUrl } from "../CarrierSignatures.js"
import { SessionTokens } from "../SessionTokens.js"
import { joinStreamTwiml } from "./CallAdmission.js"

/** An outer bound on the carrier's answer to the move (the adapters time their own requests out first). */
const MOVE_TIMEOUT = Duration.seconds(10)

/**
 * The CallMover adapter (docs/design.md, "The path of a failover", across instances): reserves an
 * idle dial-in agent of the call's environment on another live instance, exactly as placement
 * does for a new call (InstanceStore.reserve), issues the stream's single-use session token with
 * the session's id, that instance and socket, and `resumed`, and asks the carrier once for a
 * live-call update with a new `<Connect><Stream>` to that instance (Twilio and TeXML, built as
 * the call entry builds it). Call Control calls are not moved (the failover stays on this instance).
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
    const self = registry.instanceId

    const mover: CallMoverShape = {
      move: (info, resumed) =>
        Effect.gen(function* () {
          const kind = info.call.kind
          if (kind === "telnyx-call-control") return Option.none()
          yield* registry.flush(info.agentId, info.environmentId)
          const reserved = yield* store.reserve(info.agentId, info.environmentId, self, RESERVATION_HOLD_MS, ttlMs)
          // None elsewhere, or the registry still lists one here: the failover waits on this instance.
          if (Option.isNone(reserved) || reserved.value.instanceId === self) return Option.none()
          const { instanceId, socketId } = reserved.value
          const entry = registry.known(instanceId)
          const live = Option.isSome(entry) ? entry : Option.fromNullable((yield* registry.instances).find((e) => e.id === instanceId))
          if (Option.isNone(live) || live.value.draining) return Option.none()
          const token = tokens.issue({
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
            placedOn: instanceId,
            agentSocket: socketId,
            resumed
          })
          const twiml = joinStreamTwiml(kind, { publicUrl: publicUrl.current(), fleetUrl: config.fleetUrl }, {
            streamBase: publicWsUrl(live.value.publicUrl),
            token,
            agentId: info.agentId,
            environmentId: info.environmentId,
            sessionId: info.sessionId,
            from: info.from ?? undefined,
            to: info.to ?? undefined,
            direction: info.direction
          })
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
    ;(yield* CallMover).install(mover)
    return { move: mover.move } as const
  })
}) {}
