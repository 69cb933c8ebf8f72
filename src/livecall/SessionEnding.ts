import { Data } from "effect"
import type { HardError } from "../kernel/HardError.js"

/** How a session ends; decided once, by whichever comes first. */
export type SessionEnding = Data.TaggedEnum<{
  /**
   * The caller hung up (carrier stop, stream closed, CallHungUp), the agent hung up (`hangup`
   * event or the Twilio-compatible REST API), the agent closed its socket cleanly (1000), or an
   * operator hung up through `DELETE .../calls/{sessionId}` (api_hangup).
   */
  Completed: { readonly reason: "caller_hangup" | "agent_hangup" | "agent_closed" | "api_hangup" }
  /** The agent asked to move the call to `to`. */
  Transfer: { readonly to: string }
  /**
   * The agent handed the call a TwiML document through the Twilio-compatible REST API; `reason`
   * is agent_transfer when it dials, agent_hangup when it only hangs up, agent_twiml otherwise.
   */
  Twiml: { readonly twiml: string; readonly reason: "agent_transfer" | "agent_hangup" | "agent_twiml" }
  /** SESSION_MAX_DURATION elapsed. */
  Timeout: {}
  /** A hard error: the rescue runs. */
  Failed: { readonly error: HardError }
  /**
   * Another instance claimed the session (this one had paused, or lost the store, for longer than
   * the fleet waits): both legs are closed, with no carrier request, no rescue and no ending of
   * this instance's own (docs/reliability.md, "Fencing").
   */
  TakenOver: {}
  /**
   * An agent failover moved the call's stream to another instance (`to`), which holds the session
   * from now on: this instance lets go with no carrier request, no rescue and no ending written
   * (docs/design.md, "The path of a failover").
   */
  Moved: { readonly to: string }
}>
export const SessionEnding = Data.taggedEnum<SessionEnding>()
