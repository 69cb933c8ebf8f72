import type { Either, Option } from "effect"
import type { StreamOpening } from "../../kernel/CallLegs.js"
import type { FrameProblem } from "../../frames/FrameDecoding.js"
import type { SessionClaims } from "../SessionTokens.js"

/**
 * What a carrier stream handler needs from the rest of callgate, as plain synchronous functions
 * (CarrierStreams provides them): checking and spending the session token, opening the session. `open`
 * binds the stream's events to the new session before it returns, so the frames right after
 * `start` already reach it.
 */
export interface StreamHost {
  readonly verifyToken: (token: string) => Option.Option<SessionClaims>
  /**
   * Spends a verified token (single use, fleet-wide) and calls `done` once the store answered:
   * true for its first presentation, false for a replay (already logged and counted).
   */
  readonly spend: (claims: SessionClaims, provider: "twilio" | "telnyx", done: (first: boolean) => void) => void
  readonly open: (opening: StreamOpening) => Either.Either<void, FrameProblem>
  /** The stream presented bad credentials (counted per client address: docs/security.md). */
  readonly authFailed?: () => void
}
