/**
 * Turn detection on the recordings in test/fixtures/audio, as numbers: a set of two-sided
 * conversations (caller clips, the agent's greeting, line noise, digital silence; answers early,
 * late, during the end-of-turn silence, over the caller) run through a TurnTracker with real
 * detectors at the default settings, every callback written down. recordedTurns.golden.json holds
 * what the tracker reports: first with the VAD on every frame of both sides; the agent-side VAD
 * limited to the frames where an answer is awaited and the digital-silence gate left it as it was;
 * the quiet-line gate (docs/turns-and-breaker.md, "What the VAD runs on") changed two
 * conversations, and it was regenerated then. recordedTurns.test.ts holds today's code to it.
 *
 * Regenerate (only when a change to turn detection is intended): npx tsx test/turns/recordedTurns.ts --write
 */
import { readFileSync, writeFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"
import { defaults } from "../../config/defaults.js"
import { TurnTracker } from "../../src/turns/TurnTracker.js"
import { MULAW_TO_PCM } from "../../src/audio/Mulaw.js"
import { loadFvad, VoiceDetector } from "../../src/turns/VoiceActivity.js"

const FRAME = 160
const FRAME_MS = 20

export const audio = (name: string) => new Uint8Array(readFileSync(fileURLToPath(new URL(`../fixtures/audio/${name}.ulaw`, import.meta.url))))
const silence = (ms: number) => new Uint8Array(Math.ceil(ms / FRAME_MS) * FRAME).fill(0xff)
const concat = (...parts: Array<Uint8Array>) => {
  const out = new Uint8Array(parts.reduce((n, part) => n + part.length, 0))
  let offset = 0
  for (const part of parts) {
    out.set(part, offset)
    offset += part.length
  }
  return out
}
const noise = (ms: number) => {
  const clip = audio("line-noise")
  const out = concat(...Array.from({ length: Math.ceil(ms / 3000) + 1 }, () => clip))
  return out.subarray(0, Math.ceil(ms / FRAME_MS) * FRAME)
}
const pad = (clip: Uint8Array, ms: number, filler: (ms: number) => Uint8Array = silence) => {
  const target = Math.ceil(ms / FRAME_MS) * FRAME
  return clip.length >= target ? clip : concat(clip, filler(((target - clip.length) / FRAME) * FRAME_MS))
}

/** The last frame above -60 dBFS: where a clean clip's speech ends. */
export const lastLoudMs = (clip: Uint8Array) => {
  let last = 0
  for (let i = 0; i + FRAME <= clip.length; i += FRAME) {
    let power = 0
    for (let j = 0; j < FRAME; j++) power += MULAW_TO_PCM[clip[i + j]!]! ** 2
    if (power / FRAME > 1000) last = (i / FRAME) * FRAME_MS
  }
  return last
}
export const firstLoudMs = (clip: Uint8Array) => {
  for (let i = 0; i + FRAME <= clip.length; i += FRAME) {
    let power = 0
    for (let j = 0; j < FRAME; j++) power += MULAW_TO_PCM[clip[i + j]!]! ** 2
    if (power / FRAME > 1000) return (i / FRAME) * FRAME_MS
  }
  return 0
}

export interface Scenario {
  readonly name: string
  readonly caller: Uint8Array
  readonly agent: Uint8Array
}

/** The agent's greeting placed so its speech starts at `speechAtMs` of the call. */
const greetingAt = (speechAtMs: number, filler: (ms: number) => Uint8Array = silence) => {
  const greeting = audio("agent-greeting")
  const lead = Math.max(0, speechAtMs - firstLoudMs(greeting))
  return concat(filler(lead), greeting)
}

export const scenarios = (): ReadonlyArray<Scenario> => {
  const out: Array<Scenario> = []
  const clips = ["caller-appointment", "caller-account", "caller-appointment-noisy"] as const
  for (const clip of clips) {
    const caller = concat(silence(1000), audio(clip))
    const end = 1000 + lastLoudMs(audio(clip === "caller-appointment-noisy" ? "caller-appointment" : clip))
    for (const gap of [150, 300, 500, 900, 2500]) {
      out.push({ name: `${clip}, answer ${gap} ms after`, caller: pad(caller, end + 9000), agent: greetingAt(end + gap) })
    }
    out.push({ name: `${clip}, no answer`, caller: pad(caller, end + 6000), agent: silence(end + 6000) })
    out.push({ name: `${clip}, agent talking over the whole turn`, caller: pad(caller, end + 4000), agent: pad(greetingAt(0), end + 4000, noise) })
    out.push({ name: `${clip}, agent greets, caller barges in`, caller: pad(concat(silence(2500), audio(clip)), end + 9000), agent: greetingAt(500) })
    out.push({ name: `${clip} over line noise both ways, answer 600 ms after`, caller: pad(concat(noise(1000), audio(clip)), end + 8000, noise), agent: greetingAt(end + 600, noise) })
  }
  // A conversation: four turns and answers, the caller's next sentence 800 ms after each answer.
  {
    const sentences = ["caller-appointment", "caller-account", "caller-appointment-noisy", "caller-account"]
    const gaps = [350, 1200, 2800, 600]
    const greeting = audio("agent-greeting")
    const callerParts: Array<Uint8Array> = [silence(1000)]
    const agentParts: Array<Uint8Array> = []
    let position = 1000
    let agentPosition = 0
    sentences.forEach((name, i) => {
      const clip = audio(name)
      const end = position + lastLoudMs(clip)
      const agentStart = Math.max(agentPosition, end + gaps[i]! - firstLoudMs(greeting))
      agentParts.push(silence(agentStart - agentPosition), greeting)
      agentPosition = agentStart + greeting.length / 8
      const after = Math.ceil((agentPosition + 800 - (position + clip.length / 8)) / FRAME_MS) * FRAME_MS
      callerParts.push(clip, silence(after))
      position += clip.length / 8 + after
    })
    out.push({ name: "conversation of four turns", caller: concat(...callerParts, silence(2000)), agent: concat(...agentParts) })
  }
  out.push({ name: "line noise only", caller: noise(9000), agent: noise(9000) })
  out.push({ name: "digital silence only", caller: silence(5000), agent: silence(5000) })
  out.push({ name: "agent talks, caller silent", caller: silence(8000), agent: pad(greetingAt(1000), 8000) })
  return out
}

/** Everything the tracker reported for one scenario, one line per callback (times in ms of the call). */
export const runScenario = (fvad: Awaited<ReturnType<typeof loadFvadOnce>>, scenario: Scenario): Array<string> => {
  const events: Array<string> = []
  const tracker = new TurnTracker({
    caller: new VoiceDetector(fvad, defaults.VAD_MODE),
    agent: new VoiceDetector(fvad, defaults.VAD_MODE),
    minSpeechMs: defaults.VAD_MIN_SPEECH_MS,
    agentMinSpeechMs: defaults.VAD_AGENT_MIN_SPEECH_MS,
    turnEndSilenceMs: defaults.TURN_END_SILENCE_MS,
    onTurnEnded: (turn) => events.push(`turn ${turn.index} ${turn.input} ended ${turn.endedAtMs} detected ${turn.detectedAtMs}`),
    onCallerResumed: (turn, atMs) => events.push(`turn ${turn.index} superseded at ${atMs}`),
    onAgentResponded: (turn) => events.push(`turn ${turn.index} answered ${turn.respondedAtMs} latency ${turn.latencyMs}`)
  })
  const quiet = new Uint8Array(FRAME).fill(0xff)
  const frames = Math.max(scenario.caller.length, scenario.agent.length) / FRAME
  for (let i = 0; i < frames; i++) {
    const at = i * FRAME_MS
    const slice = (clip: Uint8Array) => (i * FRAME + FRAME <= clip.length ? clip.subarray(i * FRAME, i * FRAME + FRAME) : quiet)
    tracker.callerAudio(slice(scenario.caller), at)
    tracker.agentAudio(slice(scenario.agent), at)
  }
  tracker.close()
  return events
}

export const loadFvadOnce = () => Effect.runPromise(loadFvad)

export const GOLDEN = fileURLToPath(new URL("./recordedTurns.golden.json", import.meta.url))

export const runAll = async (): Promise<Record<string, Array<string>>> => {
  const fvad = await loadFvadOnce()
  return Object.fromEntries(scenarios().map((scenario) => [scenario.name, runScenario(fvad, scenario)]))
}

if (process.argv.includes("--write")) {
  const results = await runAll()
  writeFileSync(GOLDEN, `${JSON.stringify(results, null, 2)}\n`)
  process.stdout.write(`wrote ${Object.keys(results).length} scenarios to ${GOLDEN}\n`)
}
