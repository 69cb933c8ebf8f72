/**
 * Every caller sentence accounted for (docs/turns-and-breaker.md, "Turn accounting"): given the
 * sentences a simulated caller played (with the truth: where each one's speech really ended and
 * when the agent began to answer it) and the turns callgate reported, each sentence is one of
 *
 * - detected: a turn ended at its speech's end (within `toleranceMs`), and the agent began after
 *   the end-of-turn silence had passed;
 * - overlap: a turn ended at its speech's end, but the agent began before the end-of-turn silence
 *   had passed: the agent's onset ended the turn, which is timed from the caller's last voiced
 *   frame to the agent's first (so its latency is shorter than the end-of-turn silence);
 * - merge: no turn of its own because the caller spoke again before the end-of-turn silence had
 *   passed: correctly one turn with what followed. The silence counts from the last frame the VAD
 *   called voiced (its hangover runs up to 100 ms past the last loud frame) to the next voiced one
 *   (a soft onset is voiced before it is loud), so a pause from last loud frame to next first loud
 *   frame up to the end-of-turn silence plus `toleranceMs` merges;
 * - unfinished: played too close to the end of the measurement for its turn to be over;
 * - miss: anything else: a turn the breaker never watched.
 *
 * Turns matched to no sentence are extra: a split (it ended inside a sentence's speech: a pause
 * within the sentence was taken for the end of the turn) or noise (it ended outside every
 * sentence: line noise taken for speech).
 */

export interface PlayedSentence {
  /** Its first loud frame: where its speech really began, ms on the clock the turns use. */
  readonly startedAtMs: number
  /** Its last loud frame: where its speech really ended. */
  readonly speechEndedAtMs: number
  /** When the agent's answer audio began (its first loud frame), if it did. */
  readonly agentStartedAtMs: number | undefined
}

export interface ReportedTurn {
  readonly endedAtMs: number
}

export type SentenceOutcome = "detected" | "overlap" | "merge" | "unfinished" | "miss"

export interface TurnAccount {
  readonly sentences: number
  readonly detected: number
  readonly overlap: number
  readonly merge: number
  readonly unfinished: number
  readonly miss: number
  /** Turns matched to no sentence. */
  readonly extraSplit: number
  readonly extraNoise: number
}

export interface AccountingOptions {
  readonly turnEndSilenceMs: number
  /** How far a turn's end may lie from the sentence's last loud frame and still be its turn. */
  readonly toleranceMs: number
  /** The end of what was observed: a sentence whose end-of-turn silence had not passed by then is unfinished. */
  readonly observedUntilMs: number
}

/** Sentences and turns of one call, both in time order. */
export const classifyCall = (
  sentences: ReadonlyArray<PlayedSentence>,
  turns: ReadonlyArray<ReportedTurn>,
  options: AccountingOptions
): { readonly outcomes: ReadonlyArray<SentenceOutcome>; readonly extra: ReadonlyArray<"split" | "noise"> } => {
  const used = new Set<number>()
  const outcomes: Array<SentenceOutcome> = sentences.map((sentence) => {
    let best = -1
    for (let i = 0; i < turns.length; i++) {
      if (used.has(i)) continue
      const distance = Math.abs(turns[i]!.endedAtMs - sentence.speechEndedAtMs)
      if (distance <= options.toleranceMs && (best < 0 || distance < Math.abs(turns[best]!.endedAtMs - sentence.speechEndedAtMs))) best = i
    }
    if (best >= 0) {
      used.add(best)
      const agent = sentence.agentStartedAtMs
      return agent !== undefined && agent - sentence.speechEndedAtMs < options.turnEndSilenceMs ? "overlap" : "detected"
    }
    return "miss"
  })
  sentences.forEach((sentence, i) => {
    if (outcomes[i] !== "miss") return
    const next = sentences[i + 1]
    if (next !== undefined && next.startedAtMs - sentence.speechEndedAtMs < options.turnEndSilenceMs + options.toleranceMs) outcomes[i] = "merge"
    else if (sentence.speechEndedAtMs + options.turnEndSilenceMs + options.toleranceMs > options.observedUntilMs) outcomes[i] = "unfinished"
  })
  const extra: Array<"split" | "noise"> = []
  turns.forEach((turn, i) => {
    if (used.has(i)) return
    const inside = sentences.some((s) => turn.endedAtMs >= s.startedAtMs && turn.endedAtMs <= s.speechEndedAtMs + options.toleranceMs)
    extra.push(inside ? "split" : "noise")
  })
  return { outcomes, extra }
}

export const emptyAccount = (): TurnAccount => ({
  sentences: 0,
  detected: 0,
  overlap: 0,
  merge: 0,
  unfinished: 0,
  miss: 0,
  extraSplit: 0,
  extraNoise: 0
})

export const addCall = (account: TurnAccount, call: ReturnType<typeof classifyCall>): TurnAccount => {
  const count = (outcome: SentenceOutcome) => call.outcomes.filter((o) => o === outcome).length
  return {
    sentences: account.sentences + call.outcomes.length,
    detected: account.detected + count("detected"),
    overlap: account.overlap + count("overlap"),
    merge: account.merge + count("merge"),
    unfinished: account.unfinished + count("unfinished"),
    miss: account.miss + count("miss"),
    extraSplit: account.extraSplit + call.extra.filter((e) => e === "split").length,
    extraNoise: account.extraNoise + call.extra.filter((e) => e === "noise").length
  }
}
