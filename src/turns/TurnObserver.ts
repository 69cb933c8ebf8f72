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
  /** The session ended: stop timers, release resources. Idempotent. */
  close(): void
}

export const nullTurnObserver: TurnObserver = {
  callerAudio: () => {},
  callerDtmf: () => {},
  agentAudio: () => {},
  close: () => {}
}
