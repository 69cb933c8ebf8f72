import { Effect, Option } from "effect"
import type { ResumedSession } from "../kernel/CallLegs.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"

/**
 * Moves a live call to another instance of the fleet in an agent failover (docs/design.md, "The
 * path of a failover"): when no dial-in agent of the environment is idle on this instance but one
 * is on another, the carrier is asked, once, to send the call's media stream there, with a
 * single-use session token that names the session and `resumed`. The port lives here, under
 * LiveCall; its adapter (src/telephony/entry/CallRelocation.ts) reserves the agent through the
 * fleet's store, builds the TwiML and asks the carrier.
 */
export interface CallMoverShape {
  /**
   * Some(the instance id) once the carrier accepted the move; None when no other instance has an
   * idle agent, the call's kind cannot be moved this way, or the carrier refused (the call stays).
   * `ready`: what the next instance reads (the checkpoint, the legs) is in the store; awaited before
   * the carrier is asked, so the reservation and the writes overlap.
   */
  readonly move: (info: SessionInfo, resumed: ResumedSession, ready: Effect.Effect<void>) => Effect.Effect<Option.Option<string>>
}

/** No fleet to move to (a single instance, unit tests): calls stay here. */
export const stayingHere: CallMoverShape = { move: () => Effect.succeed(Option.none()) }

/**
 * The slot LiveCalls moves calls through: it stays here until the adapter installs itself. A slot,
 * not a plain port, because the adapter is built from the fleet's registry, which counts the live
 * calls (InstanceRegistry needs LiveCalls): the slot breaks that loop of layers.
 */
export class CallMover extends Effect.Service<CallMover>()("callgate/CallMover", {
  succeed: (() => {
    let current: CallMoverShape = stayingHere
    return {
      move: (info: SessionInfo, resumed: ResumedSession, ready: Effect.Effect<void>) => Effect.suspend(() => current.move(info, resumed, ready)),
      install: (mover: CallMoverShape): void => {
        current = mover
      }
    } as const
  })()
}) {}
