import { describe, expect, it } from "vitest"
import { ChunkReorder } from "../../../src/telephony/streams/ChunkReorder.js"

const collect = (window = 8, first = 1) => {
  const out: Array<string> = []
  const reorder = new ChunkReorder(window, (payload) => out.push(payload), first)
  return { out, reorder, push: (chunk: number) => reorder.push(chunk, `p${chunk}`) }
}

describe("ChunkReorder", () => {
  it("delivers chunks in order at once when they arrive in order", () => {
    const { out, push, reorder } = collect()
    for (let n = 1; n <= 20; n++) expect(push(n)).toBe(true)
    expect(out).toEqual(Array.from({ length: 20 }, (_, i) => `p${i + 1}`))
    expect(reorder.pending).toBe(0)
  })

  it("holds early chunks until the gap fills, then delivers the run", () => {
    const { out, push, reorder } = collect()
    push(1)
    push(3)
    push(4)
    expect(out).toEqual(["p1"])
    expect(reorder.pending).toBe(2)
    push(2)
    expect(out).toEqual(["p1", "p2", "p3", "p4"])
    expect(reorder.pending).toBe(0)
  })

  it("puts any shuffle within the window back in order", () => {
    const { out, push } = collect(8)
    const order = Array.from({ length: 400 }, (_, i) => i + 1)
    // Shuffle inside blocks of 8 (a chunk is never more than 7 places from home).
    let seed = 7
    for (let block = 0; block < order.length; block += 8) {
      for (let i = block + 7; i > block; i--) {
        seed = (seed * 1103515245 + 12345) % 2 ** 31
        const j = block + (seed % (i - block + 1))
        ;[order[i], order[j]] = [order[j]!, order[i]!]
      }
    }
    for (const chunk of order) expect(push(chunk)).toBe(true)
    expect(out).toEqual(Array.from({ length: 400 }, (_, i) => `p${i + 1}`))
  })

  it("drops duplicates and late chunks", () => {
    const { out, push, reorder } = collect()
    push(1)
    push(2)
    push(2)
    push(1)
    push(4)
    push(4)
    push(3)
    expect(out).toEqual(["p1", "p2", "p3", "p4"])
    expect(reorder.dropped).toBe(3)
  })

  it("reports a gap the window cannot bridge as beyond repair", () => {
    const { out, push } = collect(8)
    push(1)
    expect(push(3)).toBe(true)
    expect(push(9)).toBe(true)
    expect(push(10)).toBe(false)
    expect(out).toEqual(["p1"])
  })

  it("re-bases once, costing one window of delay, on a stream that does not start at chunk 1", () => {
    const { out, push } = collect(4)
    expect(push(101)).toBe(true)
    expect(push(100)).toBe(true)
    // Earlier chunks might still come: nothing is delivered until the window is full.
    expect(out).toEqual([])
    expect(push(102)).toBe(true)
    expect(out).toEqual(["p100", "p101", "p102"])
    expect(push(103)).toBe(true)
    expect(out).toEqual(["p100", "p101", "p102", "p103"])
    // Once audio has flowed, a far jump is a real gap.
    expect(push(200)).toBe(false)
  })

  it("a stream whose first chunks were lost starts from the lowest chunk held once the window is full", () => {
    const { out, push } = collect(8)
    for (const chunk of [3, 4, 5, 6, 7, 8]) push(chunk)
    expect(out).toEqual([])
    push(9)
    expect(out).toEqual(["p3", "p4", "p5", "p6", "p7", "p8", "p9"])
  })

  it("flush delivers what is held in order, skipping gaps that never filled", () => {
    const { out, push, reorder } = collect(8)
    push(1)
    push(5)
    push(3)
    reorder.flush()
    expect(out).toEqual(["p1", "p3", "p5"])
    expect(reorder.pending).toBe(0)
  })
})
