import { Context, Effect, Layer } from "effect"
import { Carriers } from "../core/Carrier.js"
import type { FallbackRecord } from "../fallback/FallbackRecord.js"
import type { HardError } from "../core/HardError.js"
import type { SessionInfo } from "../core/SessionInfo.js"

/** What the rescue did, recorded on the session (status is always `failed`). */
export interface RescueOutcome {
  /** Replaces the hard error kind as the session's endReason (e.g. "fallback_phone"). */
  readonly endReason?: string | undefined
  /** Stored as the session's `fallback` field. */
  readonly fallback?: FallbackRecord | undefined
}

/**
 * The action taken when a live call hits a hard error; the trigger lives in the session. Called
 * at most once per session, while the carrier stream is still open (so TwiML can still take the
 * call over), before the session's record is closed and session.ended is queued. It must not
 * fail: an implementation handles its own errors and falls back to ending the call.
 */
export interface RescueShape {
  readonly rescue: (session: SessionInfo, error: HardError) => Effect.Effect<RescueOutcome>
}

export class Rescue extends Context.Tag("callgate/Rescue")<Rescue, RescueShape>() {}

/**
 * The default: no fallback, the call ends (spec: type Disabled means the session is failed and
 * the call ends). The error fallback issue provides the implementation that transfers or asks the
 * fallback webhook.
 */
export const HangUpRescueLive = Layer.effect(
  Rescue,
  Effect.map(Carriers, (carriers) =>
    Rescue.of({
      rescue: (session, error) =>
        carriers.hangup(session.call).pipe(
          Effect.catchAll((carrierError) =>
            Effect.logWarning("hanging up after a hard error failed", { error: carrierError.message })
          ),
          Effect.annotateLogs({ sessionId: session.sessionId, hardError: error.kind }),
          Effect.as({})
        )
    })
  )
)
