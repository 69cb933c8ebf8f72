import { createHash } from "node:crypto"

/**
 * The Twilio-shaped account id callgate gives an agent (`start.accountSid`): `AC` and 32 hex
 * digits, derived from the agent id, so the official Twilio SDKs (which refuse an account SID that
 * does not start with AC) accept it, and every instance computes the same one. It names the agent
 * in the Twilio-compatible call-control API (docs/calls.md, "Controlling a call from the agent");
 * it is not a secret: the API key is.
 */
export const accountSidOf = (agentId: string): string =>
  `AC${createHash("sha256").update(`callgate-account:${agentId}`, "utf8").digest("hex").slice(0, 32)}`
