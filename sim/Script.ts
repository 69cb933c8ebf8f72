import { loadAudio } from "./AudioSource.js"
import type { AnswerWait, CloseInfo, PlayResult, SimCall } from "./SimCall.js"

/** One step of a caller's script. Audio is a Buffer of mu-law or a `loadAudio` spec ("speech:1500", a file path). */
export type ScriptStep =
  | { readonly play: Buffer | string }
  | { readonly waitForAnswer: { readonly timeoutMs?: number } }
  | { readonly waitForQuiet: { readonly quietMs?: number; readonly timeoutMs?: number } }
  | { readonly pause: number }
  | { readonly dtmf: string; readonly gapMs?: number }
  | { readonly hangup: true }

export type StepOutcome =
  | { readonly step: "play"; readonly result: PlayResult }
  | { readonly step: "waitForAnswer"; readonly result: AnswerWait }
  | { readonly step: "waitForQuiet" | "pause" | "dtmf" }
  | { readonly step: "hangup"; readonly result: CloseInfo }

/**
 * Runs a caller's script step by step, e.g.
 *
 *   await runScript(call, [{ play: "speech:1500" }, { waitForAnswer: { timeoutMs: 5000 } },
 *     { waitForQuiet: {} }, { dtmf: "42" }, { pause: 500 }, { hangup: true }])
 *
 * Stops early when the call ends; `onStep` sees each outcome as it happens.
 */
export const runScript = async (
  call: SimCall,
  steps: ReadonlyArray<ScriptStep>,
  onStep?: (outcome: StepOutcome, index: number) => void
): Promise<Array<StepOutcome>> => {
  const outcomes: Array<StepOutcome> = []
  const record = (outcome: StepOutcome) => {
    outcomes.push(outcome)
    onStep?.(outcome, outcomes.length - 1)
  }
  for (const step of steps) {
    if ("hangup" in step) {
      record({ step: "hangup", result: await call.hangup() })
      break
    }
    if (!call.isOpen) break
    if ("play" in step) record({ step: "play", result: await call.play(typeof step.play === "string" ? loadAudio(step.play) : step.play) })
    else if ("waitForAnswer" in step) record({ step: "waitForAnswer", result: await call.waitForAgentAnswer(step.waitForAnswer) })
    else if ("waitForQuiet" in step) record((await call.waitForAgentQuiet(step.waitForQuiet), { step: "waitForQuiet" }))
    else if ("pause" in step) record((await call.pause(step.pause), { step: "pause" }))
    else record((await call.sendDtmf(step.dtmf, step.gapMs), { step: "dtmf" }))
  }
  return outcomes
}
