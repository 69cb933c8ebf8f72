/**
 * The per-frame hook the relay calls for every call: plain synchronous methods, no Effect and no
 * allocation expected per call, because it runs once per 20 ms frame per direction. `frame` is
 * the decoded mu-law audio (usually 160 bytes); it is only valid during the call (the relay reuses
 * the buffer), so an observer copies what it keeps. `atMs` is a monotonic clock in milliseconds.
 */
export interface TurnObserver {
  callerAudio(frame: Uint8Array, atMs: number): void
  callerDtmf(digit: string, atMs: number): void
  agentAudio(frame: Uint8Array, atMs: number): void
  /**
   * A mark of callgate's to send the carrier right after the frame just observed (the answer to a
   * turn began: docs/observability.md, "Latency at playout"), or undefined; read once per agent frame.
   */
  takeMark(): string | undefined
  /** The carrier echoed one of callgate's marks (`isPlayoutMark`). */
  playoutMarkEchoed(name: string, atMs: number): void
  /** The agent sent `clear`. */
  agentClear(atMs: number): void
  /**
   * The call's agent leg ended and a failover seeks the next agent (docs/reliability.md, "Agent
   * failover"): until `agentBack`, no answer is timed; turns still end and are numbered on.
   */
  agentAway(atMs: number): void
  /** A new agent took the call: a turn still waiting is timed from here, less what it waited before the old leg ended. */
  agentBack(atMs: number): void
  /** The session ended: stop timers, release resources. Idempotent. */
  close(): void
}

export const nullTurnObserver: TurnObserver = {
  callerAudio: () => {},
  callerDtmf: () => {},
  agentAudio: () => {},
  takeMark: () => undefined,
  playoutMarkEchoed: () => {},
  agentClear: () => {},
  agentAway: () => {},
  agentBack: () => {},
  close: () => {}
}
