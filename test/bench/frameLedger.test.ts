import { describe, expect, it } from "vitest"
import { ReceiveLedger, SendLedger } from "../../bench/frameLedger.js"
import { writeStamp } from "../../sim/FrameStamp.js"

const frame = (stream: number, seq: number, sentUs: number) => {
  const bytes = new Uint8Array(160).fill(0xff)
  writeStamp(bytes, stream, seq, sentUs)
  return bytes
}

describe("ReceiveLedger", () => {
  it("counts exactly the sender's window: arrivals inside it, nothing before or after it", () => {
    const ledger = new ReceiveLedger()
    ledger.record()
    // Stream 7 sent 1..10; the window covered 3..8. Frame 5 never arrives; 1, 2, 9, 10 are outside.
    for (const seq of [1, 2, 3, 4, 6, 7, 8, 9, 10]) ledger.receive(frame(7, seq, 1_000_000 + seq * 20_000), 1_000_000 + seq * 20_000 + 400)
    const figures = ledger.settle([[7, 3, 8]])
    expect(figures).toMatchObject({ sent: 6, delivered: 5, lost: 1, duplicates: 0, unstamped: 0 })
    expect(figures.lossPercent).toBeCloseTo(16.6667, 3)
    expect(figures.delayMs.p50).toBe(0.4)
    expect(figures.delayMs.max).toBe(0.4)
  })

  it("keeps streams apart, counts duplicates once, and reports unstamped frames", () => {
    const ledger = new ReceiveLedger()
    ledger.record()
    ledger.receive(frame(1, 1, 0), 1000)
    ledger.receive(frame(1, 1, 0), 2000)
    ledger.receive(frame(2, 1, 0), 3000)
    ledger.receive(new Uint8Array(160).fill(0xff), 4000)
    const figures = ledger.settle([
      [1, 1, 1],
      [2, 1, 2],
      [3, 1, 0]
    ])
    expect(figures).toMatchObject({ sent: 3, delivered: 2, lost: 1, duplicates: 1, unstamped: 1 })
    expect(figures.delayMs.p99).toBe(3)
  })

  it("records nothing before record() and forgets everything once settled", () => {
    const ledger = new ReceiveLedger()
    ledger.receive(frame(1, 1, 0), 10)
    ledger.record()
    expect(ledger.settle([[1, 1, 1]])).toMatchObject({ sent: 1, delivered: 0, lost: 1 })
    ledger.receive(frame(1, 1, 0), 10)
    ledger.record()
    expect(ledger.settle([[1, 1, 1]]).delivered).toBe(0)
  })

  it("reports no delay when nothing arrived", () => {
    const ledger = new ReceiveLedger()
    ledger.record()
    const figures = ledger.settle([])
    expect(figures.sent).toBe(0)
    expect(figures.delayMs.p99).toBeNaN()
  })
})

describe("SendLedger", () => {
  it("gives each stream the sequence numbers sent between open and close, new streams from 1", () => {
    const counters = new Map<number, number>([
      [1, 10],
      [2, 4]
    ])
    const ledger = new SendLedger(() => counters.entries())
    ledger.open()
    counters.set(1, 60)
    counters.set(3, 7)
    expect(ledger.close()).toEqual([
      [1, 11, 60],
      [2, 5, 4],
      [3, 1, 7]
    ])
  })
})
