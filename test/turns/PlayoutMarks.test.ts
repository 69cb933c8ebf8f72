import { describe, expect, it } from "vitest"
import { isPlayoutMark, PlayoutMarks } from "../../src/turns/PlayoutMarks.js"
import type { AnsweredTurn } from "../../src/turns/TurnTracker.js"

const turn = (index: number, endedAtMs: number, respondedAtMs: number, answerAudioMs: number): AnsweredTurn => ({
  index,
  input: "speech",
  endedAtMs,
  detectedAtMs: endedAtMs + 700,
  respondedAtMs,
  latencyMs: respondedAtMs - endedAtMs,
  answerAudioMs
})

const marks = () => {
  const played: Array<{ index: number; playedAtMs: number; playedLatencyMs: number }> = []
  const notPlayed: Array<{ index: number; atMs: number }> = []
  const playout = new PlayoutMarks({
    onPlayed: (index, playedAtMs, playedLatencyMs) => played.push({ index, playedAtMs, playedLatencyMs }),
    onNotPlayed: (index, atMs) => notPlayed.push({ index, atMs })
  })
  return { playout, played, notPlayed }
}

describe("PlayoutMarks", () => {
  it("one mark per answered turn, named so the relay keeps it from the agent", () => {
    const { playout } = marks()
    expect(playout.take()).toBeUndefined()
    playout.answered(turn(1, 1000, 1800, 100))
    const name = playout.take()
    expect(name).toBe("callgate:played:1")
    expect(isPlayoutMark(name!)).toBe(true)
    expect(isPlayoutMark("reply-1")).toBe(false)
    expect(playout.take()).toBeUndefined()
  })

  it("the answer began playing the answer's audio before the echo, never before it arrived", () => {
    const { playout, played } = marks()
    playout.answered(turn(1, 1000, 1800, 100))
    playout.take()
    // Echoed 1.6 s after the answer arrived: 100 ms of it was queued before the mark.
    playout.echoed("callgate:played:1", 3400)
    expect(played).toEqual([{ index: 1, playedAtMs: 3300, playedLatencyMs: 2300 }])
    // A carrier that echoes before the audio could have played (no playout delay) gives the arrival time.
    playout.answered(turn(2, 5000, 5600, 200))
    playout.take()
    playout.echoed("callgate:played:2", 5650)
    expect(played[1]).toEqual({ index: 2, playedAtMs: 5600, playedLatencyMs: 600 })
  })

  it("a clear before the echo: not played, and the echo the carrier then returns changes nothing", () => {
    const { playout, played, notPlayed } = marks()
    playout.answered(turn(1, 1000, 1800, 100))
    playout.take()
    playout.answered(turn(2, 2500, 2900, 100))
    playout.take()
    playout.echoed("callgate:played:1", 2000)
    playout.cleared(3000)
    playout.echoed("callgate:played:2", 3001)
    expect(played.map((p) => p.index)).toEqual([1])
    expect(notPlayed).toEqual([{ index: 2, atMs: 3000 }])
  })

  it("a clear before the mark went out: that answer is not played either, and no mark is sent for it", () => {
    const { playout, played, notPlayed } = marks()
    playout.answered(turn(1, 1000, 1800, 100))
    playout.take()
    playout.answered(turn(2, 2500, 2900, 100))
    playout.cleared(3000)
    expect(playout.take()).toBeUndefined()
    expect(played).toEqual([])
    expect(notPlayed).toEqual([
      { index: 1, atMs: 3000 },
      { index: 2, atMs: 3000 }
    ])
  })

  it("marks of another call or unknown names are ignored", () => {
    const { playout, played } = marks()
    playout.answered(turn(1, 1000, 1800, 100))
    playout.take()
    playout.echoed("callgate:played:7", 2000)
    playout.close()
    playout.echoed("callgate:played:1", 2100)
    expect(played).toEqual([])
  })
})
