/**
 * What the demo's call is: who calls whom, what the caller says, how the agent answers, and how the
 * environment is configured for it.
 */
import { fileURLToPath } from "node:url"
import { readUlawFile } from "../../sim/AudioSource.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"

const file = (path: string) => fileURLToPath(new URL(path, import.meta.url))

export const AGENT_ID = "demo-agent"
export const CALLER_NUMBER = "+14155550100"
export const AGENT_NUMBER = "+14155550111"
export const PERSON_NUMBER = "+14155550123"
export const FALLBACK_TWIML = `<Response><Say>Sorry, our assistant is unavailable. Connecting you to a person.</Say><Dial>${PERSON_NUMBER}</Dial></Response>`
/** The environment's Error Fallback Timeout. The agent answers in ~1.2 s (700 ms end of turn + 400 ms thinking + its lead-in). */
export const RESPONSE_TIMEOUT_SECONDS = 2
export const AGENT_THINKING_MS = 400
export const ANSWERED_TURNS = 2
/** The whole tour takes ~20 s; past this something is stuck. */
export const DEMO_DEADLINE_MS = 90_000

/**
 * The caller's three turns: the three phrases of a recorded caller, split at its two pauses
 * (320 and 440 ms, too short to end a turn on their own), as 20 ms frame ranges.
 */
const recording = readUlawFile(file("../agents/audio/caller-appointment.ulaw"))
const frames = (from: number, to: number) => recording.subarray(from * FRAME_BYTES, Math.min(recording.length, to * FRAME_BYTES))
export const CALLER_TURNS = [frames(0, 130), frames(130, 175), frames(175, Number.MAX_SAFE_INTEGER)]
/** The agent's reply: the greeting's first 2.6 s (up to its second pause), to keep the tour short. */
export const REPLY = readUlawFile(file("../agents/audio/agent-greeting.ulaw")).subarray(0, 132 * FRAME_BYTES)
