import type { TurnObserver } from "./TurnObserver.js"
import type { VoiceClassifier } from "./VoiceActivity.js"

/**
 * Finds the caller's turns and the agent's answers in the two audio directions of one call.
 * Plain synchronous code on the media path: every method takes the frame's time (`atMs`, the
 * relay's monotonic clock), keeps a few numbers, and calls back when something happened. No
 * timers, no Effect, no allocation per frame; the response deadline is the watchdog's business.
 *
 * Rules (docs/turns-and-breaker.md, "Turn rules"):
 * - Caller speech is voiced audio lasting at least `minSpeechMs` without a break (shorter voiced
 *   bursts, such as the VAD's reaction to a noise onset, are not speech). Once the caller speaks,
 *   gaps up to `FLICKER_GAP_MS` inside the speech need no fresh confirmation.
 * - The caller's turn ends after `turnEndSilenceMs` without caller speech. It ended at the last
 *   voiced caller frame, with the VAD's hangover (up to ~100 ms of trailing "voiced" frames that
 *   are already background) trimmed off by level, so latency counts from the real end of speech.
 * - A DTMF digit is caller input: with the caller silent, it ends a turn at once, at the digit.
 * - The agent begins responding at the first frame of voiced agent audio lasting at least
 *   `agentMinSpeechMs` after the caller's turn ended, moved back over a loud lead-in of up to
 *   100 ms that the VAD took a few frames to call voiced (a soft onset). Silence and comfort noise
 *   never count; an agent that starts speaking during the end-of-turn silence ends the caller's
 *   turn there.
 * - Caller speech before the agent answered supersedes the pending turn (`onCallerResumed`).
 */

export type TurnInput = "speech" | "dtmf"

export interface EndedTurn {
  /** 1-based, in order of the call. */
  readonly index: number
  readonly input: TurnInput
  /** The last voiced caller frame (or the digit): where the response timer starts. */
  readonly endedAtMs: number
  /** When the end was recognised (after the end-of-turn silence). */
  readonly detectedAtMs: number
}

export interface AnsweredTurn extends EndedTurn {
  /** The first voiced frame of the agent's answer. */
  readonly respondedAtMs: number
  readonly latencyMs: number
  /**
   * The agent's audio from the answer's first voiced frame to the end of the frame that showed it
   * (what a carrier plays before a mark sent right after that frame).
   */
  readonly answerAudioMs: number
}

export interface TurnTrackerOptions {
  readonly caller: VoiceClassifier
  readonly agent: VoiceClassifier
  readonly minSpeechMs: number
  readonly agentMinSpeechMs: number
  readonly turnEndSilenceMs: number
  readonly onTurnEnded?: (turn: EndedTurn) => void
  /** The caller spoke (or pressed a key) again before the agent answered the pending turn. */
  readonly onCallerResumed?: (pending: EndedTurn, atMs: number) => void
  readonly onAgentResponded?: (turn: AnsweredTurn) => void
  /** A callback threw; the tracker carries on. */
  readonly onCallbackError?: (error: unknown) => void
}

/** Inside caller speech, the VAD may drop a frame or a few; such gaps are not the end of speech. */
const FLICKER_GAP_MS = 100
/**
 * The VAD's hangover is at most 100 ms of audio (5 frames of 20 ms); the level trim never removes
 * more trailing voiced audio than that. Counted in audio, not in arrival time, so frames that
 * arrive late or bunched are trimmed the same.
 */
const MAX_HANGOVER_MS = 100
/** Recent voiced caller frames kept for the trim (enough for 100 ms of 10 ms frames, and more). */
const VOICED_HISTORY = 16
/** A frame is audibly speech when its power is this many times the line's noise floor... */
const SPEECH_OVER_FLOOR = 2.5
/** ...and above about -60 dBFS (mean square of 16-bit samples). */
const MIN_SPEECH_POWER = 1000
/**
 * The noise floor follows unvoiced frames down quickly and up slowly, so a loud frame the VAD
 * calls unvoiced (a breath, the VAD's start-up) does not lift it.
 */
const FLOOR_FALL = 0.5
const FLOOR_RISE = 0.02
/** The VAD rises on a soft onset within about 4 frames; a longer loud lead-in is not part of it. */
const MAX_ONSET_MS = 100
/** mu-law 8 kHz: bytes per millisecond. */
const BYTES_PER_MS = 8
/**
 * The agent's audio may arrive this late after the end of what it sent before (arrival jitter)
 * and still continue it; after a longer pause it is a new stretch of talk.
 */
const AGENT_GAP_MS = 100

/** Audibly speech: above about -60 dBFS and clear of the line's noise floor (-1: not known yet). */
const isLoud = (power: number, floor: number) => power >= MIN_SPEECH_POWER && (floor < 0 || power >= floor * SPEECH_OVER_FLOOR)

const followFloor = (floor: number, power: number) =>
  floor < 0 ? power : floor + (power - floor) * (power < floor ? FLOOR_FALL : FLOOR_RISE)

export class TurnTracker implements Pick<TurnObserver, "callerAudio" | "callerDtmf" | "agentAudio" | "close"> {
  private closed = false
  private turnCount = 0
  private pending: EndedTurn | undefined

  // Caller direction.
  private speaking = false
  private input: TurnInput = "speech"
  private runMs = 0
  private runConfirmed = false
  private runLastLoudAt = -1
  private lastFrameVoiced = false
  private lastVoicedAt = -Infinity
  private lastSpeechAt = -Infinity
  private noiseFloor = -1
  /** Ring of the latest voiced caller frames: arrival time and audio duration. */
  private readonly voicedTimes = new Float64Array(VOICED_HISTORY)
  private readonly voicedDurations = new Float64Array(VOICED_HISTORY)
  private voicedNewest = -1
  private voicedCount = 0

  // Agent direction.
  private agentRunMs = 0
  private agentOnset = 0
  /** The loud lead-in the current voiced run's onset was moved back over. */
  private agentLeadInMs = 0
  private agentFloor = -1
  /** The current stretch of loud agent audio (voiced or not): where it began, how long it is. */
  private agentLoudSince = 0
  private agentLoudMs = 0
  /**
   * Where the agent's audio so far ends when played back to back from its arrival, as carriers
   * play it: an agent that stops sending mid-word (cut off, or a reply that ends on a voiced
   * frame) is not still talking once that audio has played.
   */
  private agentAudioEndAt = -Infinity
  /** Since when the call has had no agent (a failover is under way); -1 while it has one. */
  private awaySince = -1

  constructor(private readonly options: TurnTrackerOptions) {}

  /** The turn waiting for the agent's answer, if any. */
  get pendingTurn(): EndedTurn | undefined {
    return this.pending
  }

  /** The caller is mid-turn (spoke, and the end-of-turn silence has not passed yet). */
  get callerSpeaking(): boolean {
    return this.speaking
  }

  /** The agent is producing voiced audio that is not yet long enough to count as an answer. */
  get agentStarting(): boolean {
    return this.agentRunMs > 0 && this.agentRunMs < this.options.agentMinSpeechMs
  }

  /** When the pending turn's answer is due, given a timeout; undefined when nothing is pending. */
  responseDeadlineMs(timeoutMs: number): number | undefined {
    return this.pending === undefined ? undefined : this.pending.endedAtMs + timeoutMs
  }

  callerAudio(frame: Uint8Array, atMs: number): void {
    if (this.closed) return
    const voiced = this.options.caller.isVoiced(frame)
    const power = this.options.caller.lastPower
    if (voiced) {
      if (this.runMs === 0) {
        this.runConfirmed = this.speaking && atMs - this.lastVoicedAt <= FLICKER_GAP_MS
        this.runLastLoudAt = -1
      }
      const frameMs = frame.length / BYTES_PER_MS
      this.runMs += frameMs
      this.rememberVoiced(atMs, frameMs)
      if (isLoud(power, this.noiseFloor)) this.runLastLoudAt = atMs
      if (!this.runConfirmed && this.runMs >= this.options.minSpeechMs) {
        this.runConfirmed = true
        if (!this.speaking) this.startSpeaking(atMs)
      }
      if (this.runConfirmed) {
        this.lastVoicedAt = atMs
        if (this.runLastLoudAt > this.lastSpeechAt) this.lastSpeechAt = this.runLastLoudAt
      }
    } else {
      this.runMs = 0
      this.runConfirmed = false
      this.noiseFloor = followFloor(this.noiseFloor, power)
    }
    this.lastFrameVoiced = voiced
    this.checkTurnEnd(atMs)
  }

  callerDtmf(_digit: string, atMs: number): void {
    if (this.closed) return
    if (this.speaking) {
      // Keys pressed while talking belong to the turn in progress.
      this.input = "dtmf"
      this.lastVoicedAt = Math.max(this.lastVoicedAt, atMs)
      this.lastSpeechAt = Math.max(this.lastSpeechAt, atMs)
      return
    }
    this.supersedePending(atMs)
    this.endTurn("dtmf", atMs, atMs)
  }

  /**
   * Whether the agent's voice can matter now: a turn waits for its answer, or the caller is
   * speaking (or may be starting to), so the agent could take the floor or already be talking
   * when the turn ends. Otherwise (the agent talks on after its answer was timed, or nobody talks)
   * the agent-side VAD is not run: only the level is read (docs/turns-and-breaker.md).
   */
  private get answerAwaited(): boolean {
    return this.pending !== undefined || this.speaking || this.runMs > 0
  }

  agentAudio(frame: Uint8Array, atMs: number): void {
    if (this.closed) return
    const agent = this.options.agent
    const listening = this.answerAwaited
    let voiced = false
    if (listening) voiced = agent.isVoiced(frame)
    else agent.measure(frame)
    const power = agent.lastPower
    const frameMs = frame.length / BYTES_PER_MS
    if (atMs > this.agentAudioEndAt + AGENT_GAP_MS) {
      // The agent went quiet by sending nothing: its last voiced run is over, whatever its last frame was.
      this.agentRunMs = 0
      this.agentLoudMs = 0
    }
    this.agentAudioEndAt = Math.max(this.agentAudioEndAt, atMs) + frameMs
    const loudBefore = this.agentLoudMs
    if (isLoud(power, this.agentFloor)) {
      if (this.agentLoudMs === 0) this.agentLoudSince = atMs
      this.agentLoudMs += frameMs
    } else {
      this.agentLoudMs = 0
    }
    if (!voiced) {
      this.agentRunMs = 0
      if (listening) this.agentFloor = followFloor(this.agentFloor, power)
      return
    }
    if (this.agentRunMs === 0) {
      // The VAD catches a soft onset a few frames late: loud audio just before the run is its start.
      const softOnset = loudBefore > 0 && loudBefore <= MAX_ONSET_MS
      this.agentOnset = softOnset ? this.agentLoudSince : atMs
      this.agentLeadInMs = softOnset ? loudBefore : 0
    }
    this.agentRunMs += frameMs
    if (this.agentRunMs < this.options.agentMinSpeechMs) return
    // The agent is speaking. It answers a pending turn, or takes the floor from a caller who has
    // fallen silent before the end-of-turn silence passed.
    if (this.pending === undefined && this.speaking && !this.lastFrameVoiced && this.runMs === 0) {
      const endedAt = this.turnEndTime()
      if (atMs > endedAt) this.endTurn(this.input, endedAt, atMs)
    }
    if (this.pending !== undefined) this.respond(Math.max(this.agentOnset, this.pending.endedAtMs))
  }

  /** The call is without an agent while true: no answer can come, and none is timed. */
  get agentIsAway(): boolean {
    return this.awaySince >= 0
  }

  /** The agent leg ended (a failover began): the old agent's audio is over. */
  agentAway(atMs: number): void {
    if (this.closed || this.awaySince >= 0) return
    this.awaySince = atMs
    this.agentRunMs = 0
    this.agentLoudMs = 0
    this.agentAudioEndAt = -Infinity
  }

  /**
   * A new agent took the call at `atMs`. The time without an agent is not an agent's latency, and
   * the new agent is not charged with its predecessor's wait: a turn still waiting for its answer
   * is timed from `atMs` (the new agent's `start`), and returned so its deadline can be armed again.
   */
  agentBack(atMs: number): EndedTurn | undefined {
    const since = this.awaySince
    this.awaySince = -1
    const pending = this.pending
    if (this.closed || since < 0 || pending === undefined) return undefined
    this.pending = { ...pending, endedAtMs: Math.max(pending.endedAtMs, atMs), detectedAtMs: Math.max(pending.detectedAtMs, atMs) }
    return this.pending
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    this.pending = undefined
    this.options.caller.close()
    this.options.agent.close()
  }

  private rememberVoiced(atMs: number, frameMs: number): void {
    this.voicedNewest = (this.voicedNewest + 1) % VOICED_HISTORY
    this.voicedTimes[this.voicedNewest] = atMs
    this.voicedDurations[this.voicedNewest] = frameMs
    if (this.voicedCount < VOICED_HISTORY) this.voicedCount++
  }

  /**
   * The last voiced caller frame, hangover trimmed: the last loud voiced frame, unless more than
   * 100 ms of quiet voiced audio followed it (then that is quiet speech, and only 100 ms goes).
   */
  private turnEndTime(): number {
    let trimmedMs = 0
    for (let seen = 0, i = this.voicedNewest; seen < this.voicedCount; seen++, i = (i + VOICED_HISTORY - 1) % VOICED_HISTORY) {
      const at = this.voicedTimes[i]!
      // Newer voiced frames were a burst too short to count as speech.
      if (at > this.lastVoicedAt) continue
      if (at <= this.lastSpeechAt) return this.lastSpeechAt
      trimmedMs += this.voicedDurations[i]!
      if (trimmedMs > MAX_HANGOVER_MS) return at
    }
    return Math.max(this.lastSpeechAt, this.lastVoicedAt - MAX_HANGOVER_MS)
  }

  private startSpeaking(atMs: number): void {
    this.supersedePending(atMs)
    this.speaking = true
    this.input = "speech"
    this.lastVoicedAt = atMs
    this.lastSpeechAt = this.runLastLoudAt >= 0 ? this.runLastLoudAt : atMs
  }

  private supersedePending(atMs: number): void {
    const pending = this.pending
    if (pending === undefined) return
    this.pending = undefined
    this.notify(() => this.options.onCallerResumed?.(pending, atMs))
  }

  private checkTurnEnd(atMs: number): void {
    // A voiced run still waiting for confirmation may yet be speech: decide once it is settled.
    if (!this.speaking || (this.runMs > 0 && !this.runConfirmed)) return
    if (atMs - this.lastVoicedAt >= this.options.turnEndSilenceMs) this.endTurn(this.input, this.turnEndTime(), atMs)
  }

  private endTurn(input: TurnInput, endedAtMs: number, detectedAtMs: number): void {
    this.speaking = false
    const turn: EndedTurn = { index: ++this.turnCount, input, endedAtMs, detectedAtMs }
    this.pending = turn
    this.notify(() => this.options.onTurnEnded?.(turn))
    // An agent already speaking when the turn ends answers it right away: its voiced audio reaches
    // the caller's last word. Audio that stopped before that (a reply long over) answers nothing.
    if (
      this.pending === turn &&
      this.agentRunMs >= this.options.agentMinSpeechMs &&
      this.agentAudioEndAt + AGENT_GAP_MS >= endedAtMs
    ) {
      this.respond(Math.max(this.agentOnset, endedAtMs))
    }
  }

  private respond(respondedAtMs: number): void {
    const pending = this.pending!
    this.pending = undefined
    const answered: AnsweredTurn = {
      ...pending,
      respondedAtMs,
      latencyMs: respondedAtMs - pending.endedAtMs,
      answerAudioMs: this.agentLeadInMs + this.agentRunMs
    }
    this.notify(() => this.options.onAgentResponded?.(answered))
  }

  /** Callbacks run on the media path: one that throws must not break the tracker or the call. */
  private notify(callback: () => void): void {
    try {
      callback()
    } catch (error) {
      try {
        this.options.onCallbackError?.(error)
      } catch {
        // Nothing sensible is left to do.
      }
    }
  }
}
