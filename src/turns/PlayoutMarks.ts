import type { AnsweredTurn } from "./TurnTracker.js"

/**
 * Marks callgate sends the carrier carry this prefix; their echoes never reach the agent. An agent
 * should not name its own marks so (docs/observability.md, "Latency at playout").
 */
export const PLAYOUT_MARK_PREFIX = "callgate:played:"

export const isPlayoutMark = (name: string) => name.startsWith(PLAYOUT_MARK_PREFIX)

export interface PlayoutHooks {
  /** The caller heard the answer to turn `index` begin at `playedAtMs` (relay clock). */
  readonly onPlayed: (index: number, playedAtMs: number, playedLatencyMs: number) => void
  /** The answer to turn `index` was cleared before the carrier confirmed it played. */
  readonly onNotPlayed: (index: number, atMs: number) => void
}

interface Outstanding {
  readonly name: string
  readonly index: number
  readonly endedAtMs: number
  readonly respondedAtMs: number
  readonly answerAudioMs: number
}

/**
 * Latency at playout, for one call. After the frame that showed the agent answering a turn, the
 * relay sends the carrier one mark of callgate's (`take`); Twilio and Telnyx echo a mark once the
 * audio before it has played. The answer began playing that much audio earlier:
 * `playedAt = max(respondedAt, echo - answerAudio)`, where `answerAudio` is the audio from the
 * answer's first voiced frame to the mark. A `clear` from the agent before the echo empties the
 * carrier's queue: that answer counts as not played (the echo the carrier then returns is ignored).
 * Plain synchronous code, a few calls per turn; `take` is read once per agent frame.
 */
export class PlayoutMarks {
  private due: Omit<Outstanding, "name"> | undefined
  private readonly outstanding: Array<Outstanding> = []

  constructor(private readonly hooks: PlayoutHooks) {}

  /** The agent answered `turn`: a mark is due after the current frame. */
  answered(turn: AnsweredTurn): void {
    this.due = { index: turn.index, endedAtMs: turn.endedAtMs, respondedAtMs: turn.respondedAtMs, answerAudioMs: turn.answerAudioMs }
  }

  /** The mark to send the carrier now, if one is due (at most one per answered turn). */
  take(): string | undefined {
    const due = this.due
    if (due === undefined) return undefined
    this.due = undefined
    const name = `${PLAYOUT_MARK_PREFIX}${due.index}`
    this.outstanding.push({ ...due, name })
    return name
  }

  /** The carrier echoed one of callgate's marks at `atMs`. */
  echoed(name: string, atMs: number): void {
    const at = this.outstanding.findIndex((mark) => mark.name === name)
    if (at < 0) return
    const [mark] = this.outstanding.splice(at, 1)
    const playedAtMs = Math.max(mark!.respondedAtMs, atMs - mark!.answerAudioMs)
    this.hooks.onPlayed(mark!.index, playedAtMs, playedAtMs - mark!.endedAtMs)
  }

  /** The agent sent `clear` (or its leg ended): every answer not yet confirmed was cut, the one whose mark was not yet sent too. */
  cleared(atMs: number): void {
    for (const mark of this.outstanding.splice(0)) this.hooks.onNotPlayed(mark.index, atMs)
    const due = this.due
    this.due = undefined
    if (due !== undefined) this.hooks.onNotPlayed(due.index, atMs)
  }

  close(): void {
    this.due = undefined
    this.outstanding.length = 0
  }
}
