import type { AudioFormat } from "./AudioFormat.js"
import { randomBytes } from "node:crypto"
import type { MachineVerdict, ResumedSession } from "./CallLegs.js"
import type { CallRef, Provider } from "./Carrier.js"

/** A new session id: minted when the carrier's entry webhook admits the call (or when a stream opens without one). */
export const newSessionId = () => `ses_${randomBytes(12).toString("base64url")}`

/** Whether `text` has the shape of a session id (as newSessionId mints them). */
export const isSessionId = (text: string) => /^ses_[A-Za-z0-9_-]{1,60}$/.test(text)

/** Who and what a live session is: fixed when its stream starts. */
export interface SessionInfo {
  readonly sessionId: string
  readonly agentId: string
  readonly environmentId: string
  readonly provider: Provider
  /** How to reach the live call through the carrier's REST API. */
  readonly call: CallRef
  readonly from: string | null
  readonly to: string | null
  readonly direction: "inbound" | "outbound"
  /** The carrier's id of the media stream (Twilio streamSid, Telnyx stream_id). */
  readonly streamSid: string
  /**
   * The dial-in agent socket placement reserved for this call (docs/scaling.md, "Placement"):
   * its id; null when placement found no idle agent anywhere in the fleet (rescued at once);
   * undefined when the call was not placed (any idle socket of this instance serves).
   */
  readonly reservedAgent?: string | null | undefined
  readonly createdAt: Date
  /** An outbound call's metadata, as given when it was placed. */
  readonly metadata?: Readonly<Record<string, string>> | undefined
  /** The entry URL's extra query parameters, for the agent's `start.customParameters`. */
  readonly customParameters?: Readonly<Record<string, string>> | undefined
  /** The stream's audio format; 8 kHz mu-law when absent. */
  readonly mediaFormat?: AudioFormat | undefined
  /** An outbound call's machine-detection verdict, when it came before the stream opened. */
  readonly answeredBy?: MachineVerdict | undefined
  /**
   * Set when the session came here from another instance in an agent failover (docs/design.md,
   * "The path of a failover"): the stream is the session's second (or later) one, its agent takes
   * the call over with `resume`.
   */
  readonly resumed?: ResumedSession | undefined
  /**
   * The environment's `recording` as the call's admission read it (carried in the stream's
   * session token): the recorder decides from it at the stream's start. Undefined when the stream
   * came without it: the recorder reads the environment.
   */
  readonly recording?: "on" | "off" | undefined
  /**
   * A Call Control stream's reference: the id (`jti`) of the single-use session token its
   * `stream_url` carried. Telnyx's `streaming.stopped` names a stream only by that URL, so this is
   * how a stopped stream is told apart from the session's current one after the call moved to
   * another instance (docs/reliability.md, "Agent failover"). Undefined for other kinds.
   */
  readonly streamRef?: string | undefined
}

