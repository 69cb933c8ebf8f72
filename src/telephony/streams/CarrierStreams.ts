import type { IncomingHttpHeaders } from "node:http"
import { Duration, Effect, FiberSet, Option } from "effect"
import { AuthThrottle } from "../../apikeys/AuthThrottle.js"
import { AppConfig } from "../../config/AppConfig.js"
import { PublicUrl } from "../../config/PublicUrl.js"
import { counterOn, Metrics } from "../../observability/Metrics.js"
import { LiveCalls } from "../../livecall/LiveCalls.js"
import { CallLeases } from "../../sessions/CallLeases.js"
import { CloseCode, type WireSocket } from "../../frames/WireSocket.js"
import { verifyTwilioStreamUpgrade } from "../CarrierSignatures.js"
import { type SessionClaims, SessionTokens } from "../SessionTokens.js"
import { SpentTokenStore } from "../SpentTokenStore.js"
import type { CarrierStreamLeg } from "./CarrierStreamLeg.js"
import type { StreamHost } from "./StreamHost.js"
import { TelnyxStream } from "./TelnyxStream.js"
import { TwilioStream } from "./TwilioStream.js"
import { constantTimeEqual } from "../../secrets/ConstantTime.js"

/** The parts of the upgrade request the stream handlers read. */
export interface StreamUpgrade {
  /** Path and query as received. */
  readonly url: string
  readonly headers: IncomingHttpHeaders
  /** The client's address: failed authentications are counted against it (AuthThrottle). */
  readonly address: string
}


const bearer = (header: string | string[] | undefined): string | undefined => {
  if (typeof header !== "string") return undefined
  return /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1] ?? ""
}

/** How long a stream waits for the store to record its token before it is let through unrecorded. */
const SPEND_TIMEOUT = Duration.seconds(3)

const queryToken = (url: string): string | undefined => {
  const query = url.indexOf("?")
  if (query < 0) return undefined
  return new URLSearchParams(url.slice(query + 1)).get("token") ?? undefined
}

/**
 * Terminates carrier media streams. Each accepted socket gets its dialect handler at once
 * (synchronously, in the upgrade handler) and is authenticated before any agent hears it:
 * - Twilio: X-Twilio-Signature on the upgrade when TWILIO_AUTH_TOKEN is set, then the session
 *   token in the `start` frame's customParameters, bound to its CallSid.
 * - Telnyx: the session token in `?token=`; an `Authorization: Bearer` or
 *   `x-telnyx-streaming-auth-token` header, when present, must carry the same token.
 * Refused streams are closed with 1008 and a reason. A token is single use: at `start` the stream
 * spends it in the store (SpentTokenStore, shared by the fleet) before its session opens; a second
 * presentation, on any instance, is refused with 1008 and logged. When the store does not answer,
 * the stream is let through (a signed, unexpired token for this very call) and a warning logged:
 * a store outage must not refuse every caller.
 */
export class CarrierStreams extends Effect.Service<CarrierStreams>()("callgate/CarrierStreams", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const publicUrl = yield* PublicUrl
    const tokens = yield* SessionTokens
    const registry = yield* LiveCalls
    const leases = yield* CallLeases
    const metrics = yield* Metrics
    const spent = yield* SpentTokenStore
    // Token spends run in this service's scope: one still waiting on the store at shutdown is interrupted.
    const runFork = yield* FiberSet.makeRuntime<never>()
    const throttle = yield* AuthThrottle
    const refused = counterOn(metrics.registry, "callgate_stream_auth_failures_total", "Media stream upgrades refused for missing or invalid credentials", ["provider", "reason"])

    const spend = (claims: SessionClaims, provider: "twilio" | "telnyx", done: (first: boolean) => void): void => {
      runFork(
        spent.spend(claims.jti, claims.exp).pipe(
          Effect.timeout(SPEND_TIMEOUT),
          Effect.tap((first) =>
            first
              ? Effect.void
              : Effect.sync(() => refused.inc({ provider, reason: "replayed_token" })).pipe(
                  Effect.zipRight(
                    Effect.logWarning("media stream refused: its session token was already used", {
                      provider,
                      callId: claims.callId,
                      agentId: claims.agentId,
                      environmentId: claims.environmentId
                    })
                  )
                )
          ),
          Effect.catchAll((error) =>
            Effect.as(
              Effect.logWarning("the session token's use could not be recorded; the stream is let through", {
                provider,
                callId: claims.callId,
                error: error.message
              }),
              true
            )
          ),
          Effect.flatMap((first) => Effect.sync(() => done(first)))
        )
      )
    }

    /**
     * Opens the session; an inbound call's lease in the fleet-wide count (taken at the entry, maybe
     * by another instance) is held here from now on and released when the session is over.
     */
    const open: StreamHost["open"] = (opening) => {
      const opened = registry.open(opening)
      const sessionId = opening.entrySessionId
      if (opened._tag === "Right" && sessionId !== undefined && opening.sessionId === undefined) {
        leases.hold(opening.agentId, opening.environmentId, sessionId, "inbound")
        const live = registry.live(sessionId)
        // A session that settled still active moved to another instance (an agent failover): the lease goes with it.
        if (live._tag === "Some")
          runFork(
            live.value.settled.pipe(
              Effect.exit,
              Effect.flatMap((settled) =>
                settled._tag === "Success" && Option.isSome(settled.value) && settled.value.value.status === "active"
                  ? Effect.void
                  : leases.release(opening.agentId, opening.environmentId, sessionId)
              )
            )
          )
      }
      return opened
    }
    const host: StreamHost = { verifyToken: tokens.verify, spend, open }
    const hostFor = (address: string): StreamHost => ({ ...host, authFailed: () => throttle.failed(address) })

    const refuse = (socket: WireSocket, provider: "twilio" | "telnyx", reason: string, label: string, address: string): undefined => {
      refused.inc({ provider, reason: label })
      throttle.failed(address)
      socket.close(CloseCode.policyViolation, `${provider}: ${reason}`)
      return undefined
    }

    const draining = (socket: WireSocket) => {
      if (!registry.isDraining()) return false
      socket.close(CloseCode.tryAgainLater, "callgate is shutting down: no new calls")
      return true
    }

    return {
      /** The stream's handler, or undefined when the upgrade was refused (the socket is then closing). */
      acceptTwilio: (socket: WireSocket, upgrade: StreamUpgrade): CarrierStreamLeg<unknown> | undefined => {
        if (draining(socket)) return undefined
        if (!verifyTwilioStreamUpgrade({ publicUrl: publicUrl.current(), twilioAuthToken: config.twilioAuthToken }, upgrade.url, upgrade.headers)) {
          return refuse(socket, "twilio", "invalid X-Twilio-Signature", "signature", upgrade.address)
        }
        const stream = new TwilioStream(socket, hostFor(upgrade.address))
        socket.listen(stream)
        return stream
      },
      acceptTelnyx: (socket: WireSocket, upgrade: StreamUpgrade): CarrierStreamLeg<unknown> | undefined => {
        if (draining(socket)) return undefined
        const token = queryToken(upgrade.url)
        if (token === undefined || token.length === 0) return refuse(socket, "telnyx", "missing token query parameter", "missing_token", upgrade.address)
        const presented = [bearer(upgrade.headers.authorization), upgrade.headers["x-telnyx-streaming-auth-token"]]
        for (const header of presented) {
          if (header === undefined) continue
          if (typeof header !== "string" || !constantTimeEqual(header, token)) {
            return refuse(socket, "telnyx", "stream auth token does not match", "stream_auth_token", upgrade.address)
          }
        }
        const claims = tokens.verify(token)
        if (Option.isNone(claims)) return refuse(socket, "telnyx", "invalid or expired session token", "token", upgrade.address)
        if (claims.value.kind === "twilio") return refuse(socket, "telnyx", "session token was not issued for a Telnyx stream", "token", upgrade.address)
        const stream = new TelnyxStream(socket, hostFor(upgrade.address), claims.value)
        socket.listen(stream)
        return stream
      }
    } as const
  })
}) {}
