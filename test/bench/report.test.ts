import { describe, expect, it } from "vitest"
import type { SideBySideFigures, StepFigures, SystemFigures } from "../../bench/relayLoad.js"
import { type BenchResults, compare, CPU_RATIO_GOAL, renderMarkdown } from "../../bench/report.js"

const direction = (p99: number) => ({ sent: 1000, lost: 0, lossPercent: 0, delayMs: { p50: p99 / 3, p99, max: p99 * 2 } })

const step = (calls: number, cpu: number): StepFigures =>
  ({
    calls,
    openCalls: calls,
    carrierToAgent: direction(1.5),
    agentToCarrier: direction(1.4),
    system: { cpuPercent: 10, cpuMsPerCallSecond: cpu, rssMb: 100, rssPerCallKb: 90, heapPerCallKb: 50, objectsPerCallKb: 45 },
    carrierSim: { cpuPercent: 10, loopDelayMs: { p99: 1 } },
    agentSim: { cpuPercent: 10, loopDelayMs: { p99: 1 } },
    otherCpuPercent: 0,
    turns: { spoken: 10, answered: 10, replies: 10 },
    pass: true,
    problems: [],
    setupErrors: []
  }) as unknown as StepFigures

const system = (name: "gateway" | "baseline", steps: Array<StepFigures>): SystemFigures => ({
  system: name,
  idleRssMb: 60,
  steps,
  sustainedCalls: Math.max(...steps.map((s) => s.calls))
})

const window = (relay: number, callgate: number) => ({
  baselineMsPerCallSecond: relay,
  gatewayMsPerCallSecond: callgate,
  ratio: Math.round((callgate / relay) * 100) / 100,
  baselineOpen: 50,
  gatewayOpen: 50,
  worstLossPercent: 0,
  worstP99Ms: 2.1,
  machineCpuPercent: 90
})

const sideBySide = (ratios: ReadonlyArray<readonly [number, number]>): SideBySideFigures => ({
  windowSeconds: 15,
  steps: ratios.map(([calls, ratio]) => ({ calls, windows: [window(2, 2 * ratio), window(2.2, 2.2 * ratio)], ratio }))
})

const baseline = system("baseline", [step(50, 3), step(100, 2.5)])
const gateway = system("gateway", [step(50, 3.6), step(100, 2.6)])

describe("bench report: CPU against the bare relay", () => {
  it("judges the CPU target on the side-by-side steps, every one within the goal", () => {
    const met = compare(baseline, gateway, sideBySide([[50, 1.05], [100, CPU_RATIO_GOAL]]))
    expect(met.targets.cpuAtMost110PercentOfRelay).toBe(true)
    expect(met.cpuRatioSideBySide).toEqual([{ calls: 50, ratio: 1.05 }, { calls: 100, ratio: CPU_RATIO_GOAL }])

    const notMet = compare(baseline, gateway, sideBySide([[50, 1.05], [100, 1.11]]))
    expect(notMet.targets.cpuAtMost110PercentOfRelay).toBe(false)
  })

  it("keeps the ramp's per-step ratios for information, and leaves the target unjudged without side-by-side steps", () => {
    const c = compare(baseline, gateway)
    expect(c.cpuRatioPerStep).toEqual([{ calls: 50, ratio: 1.2 }, { calls: 100, ratio: 1.04 }])
    expect(c.targets.cpuAtMost110PercentOfRelay).toBeNull()
  })

  it("renders each window and the pooled ratio, and the verdict row", () => {
    const figures = sideBySide([[50, 1.2], [100, 1.08]])
    const results: BenchResults = {
      startedAt: "2026-11-26T10:00:00.000Z",
      durationSeconds: 100,
      machine: { cores: 2, cpuModel: "test", node: "v20", platform: "linux x64", memoryGb: 24, loadAverage: { atStart: 0, atEnd: 0 } },
      settings: { steps: [50, 100], cpuSteps: [50, 100], stepSeconds: 15, parts: ["baseline", "gateway"], quick: false, profile: false, runtime: "node", source: "test" },
      baseline,
      gateway,
      sideBySide: figures,
      comparison: compare(baseline, gateway, figures)
    }
    const markdown = renderMarkdown(results)
    expect(markdown).toContain("### CPU side by side")
    expect(markdown).toContain("| 50 | 1 | 50 / 50 | 2 | 2.4 | 1.2x |")
    expect(markdown).toContain("| 100 | pooled |  |  |  | **1.08x** |")
    expect(markdown).toMatch(/CPU per call-second <= 1\.1x the bare relay's \(side by side\) \| 50 calls: 1\.2x; 100 calls: 1\.08x \| \*\*not met\*\*/)
    expect(markdown).toContain("per ramp step (one system after the other")
  })

  it("says why when the side-by-side part could not run", () => {
    const markdown = renderMarkdown({
      startedAt: "2026-11-26T10:00:00.000Z",
      durationSeconds: 1,
      machine: { cores: 2, cpuModel: "test", node: "v20", platform: "linux x64", memoryGb: 24, loadAverage: { atStart: 0, atEnd: 0 } },
      settings: { steps: [50], stepSeconds: 15, parts: ["baseline", "gateway"], quick: false, profile: false, runtime: "node", source: "test" },
      sideBySide: { error: "the relay stopped\nstack" }
    })
    expect(markdown).toContain("### CPU side by side\n\nDid not run: the relay stopped")
  })
})
