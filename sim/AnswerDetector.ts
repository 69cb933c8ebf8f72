/** The agent's answer to the caller's latest input, as the simulator measures it. */
export interface AgentAnswer {
  /** From the caller's last input (voiced frame sent or DTMF digit) to the agent's first voiced audio, ms. */
  readonly latencyMs: number
  readonly atUs: number
}

/**
 * Finds the agent's answers the way a caller hears them: the first voiced agent audio after the
 * caller's latest input, once the caller has paused (double talk is not an answer). Times are the
 * simulator's microsecond clock.
 */
export class AnswerDetector {
  private lastCallerInputUs = 0
  private callerVoiced = false
  private answeredInputUs = -1
  private last: AgentAnswer | undefined

  /** A caller media frame was sent; `voiced` when it carried speech. */
  callerFrame(voiced: boolean, atUs: number): void {
    this.callerVoiced = voiced
    if (voiced) this.lastCallerInputUs = atUs
  }

  /** A DTMF digit was sent: caller input too. */
  callerDigit(atUs: number): void {
    this.lastCallerInputUs = atUs
  }

  /** Voiced agent audio arrived; returns the answer when this is one. */
  agentVoiced(atUs: number): AgentAnswer | undefined {
    if (this.lastCallerInputUs === 0 || this.answeredInputUs === this.lastCallerInputUs || this.callerVoiced) return undefined
    this.answeredInputUs = this.lastCallerInputUs
    this.last = { latencyMs: (atUs - this.lastCallerInputUs) / 1000, atUs }
    return this.last
  }

  /** The answer to the caller's latest input, if it has already come. */
  get answerToLatestInput(): AgentAnswer | undefined {
    return this.last !== undefined && this.answeredInputUs === this.lastCallerInputUs ? this.last : undefined
  }
}
