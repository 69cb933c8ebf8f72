import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { findCpuProfile, summarizeCpuProfile } from "../../bench/cpuProfile.js"
import { repoRoot } from "../../bench/benchProcess.js"

const dir = mkdtempSync(join(tmpdir(), "cpuprofile-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const frame = (functionName: string, url = "", lineNumber = 0) => ({ functionName, scriptId: "0", url, lineNumber, columnNumber: 0 })

// (root) -> relay (src/livecall/LiveCall.ts) -> anonymous (same file); (idle); (garbage collector); writev; ws sender
const profile = {
  nodes: [
    { id: 1, callFrame: frame("(root)"), children: [2, 4, 5, 6, 7] },
    { id: 2, callFrame: frame("callerMedia", `file://${repoRoot}src/livecall/LiveCall.ts`), children: [3] },
    { id: 3, callFrame: frame("", `file://${repoRoot}src/livecall/LiveCall.ts`), children: [] },
    { id: 4, callFrame: frame("(idle)"), children: [] },
    { id: 5, callFrame: frame("(garbage collector)"), children: [] },
    { id: 6, callFrame: frame("writev"), children: [] },
    { id: 7, callFrame: frame("send", `file://${repoRoot}node_modules/ws/lib/sender.js`, 353), children: [] }
  ],
  startTime: 1_000_000,
  endTime: 1_100_000,
  // Ten samples 10 ms apart, at 1.01 s .. 1.10 s.
  samples: [2, 3, 3, 4, 5, 6, 6, 6, 7, 4],
  timeDeltas: [10_000, 10_000, 10_000, 10_000, 10_000, 10_000, 10_000, 10_000, 10_000, 10_000]
}
const file = join(dir, "CPU.test.cpuprofile")
writeFileSync(file, JSON.stringify(profile))
writeFileSync(join(dir, "CPU.small.cpuprofile"), "{}")

describe("summarizeCpuProfile", () => {
  it("attributes self time by function and by area, naming anonymous functions after their caller", () => {
    const summary = summarizeCpuProfile(file)
    expect(summary.windowed).toBe(false)
    expect(summary.sampledMs).toBe(100)
    expect(summary.busyMs).toBe(80)
    expect(summary.topFunctions[0]).toEqual({ name: "writev", selfMs: 30, percent: 37.5 })
    expect(summary.topFunctions.map((f) => f.name)).toContain("(anonymous, called by callerMedia) src/livecall/LiveCall.ts")
    expect(summary.topFunctions.map((f) => f.name)).toContain("send ws/lib/sender.js:354")
    expect(Object.fromEntries(summary.byArea.map((a) => [a.name, a.selfMs]))).toEqual({
      "(native)": 30,
      "src/livecall": 30,
      "(garbage collector)": 10,
      "npm ws": 10
    })
  })

  it("counts only the samples inside the windows", () => {
    // 1.045 s to 1.085 s: the samples at 1.05 (gc), 1.06, 1.07, 1.08 (writev).
    const summary = summarizeCpuProfile(file, { windowsUs: [[1_045_000, 1_085_000]] })
    expect(summary.windowed).toBe(true)
    expect(summary.busyMs).toBe(40)
    expect(summary.topFunctions).toEqual([
      { name: "writev", selfMs: 30, percent: 75 },
      { name: "(garbage collector)", selfMs: 10, percent: 25 }
    ])
  })

  it("falls back to the whole profile when no sample is in the windows", () => {
    expect(summarizeCpuProfile(file, { windowsUs: [[0, 10]] }).windowed).toBe(false)
  })

  it("picks the main thread's (largest) profile of a directory", () => {
    expect(findCpuProfile(dir)).toBe(file)
    expect(findCpuProfile(join(dir, "missing"))).toBeUndefined()
  })
})
