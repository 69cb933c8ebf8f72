import { describe, expect, it } from "vitest"
import { relayChartOf } from "../../bench/chart.js"
import type { StepFigures, SystemFigures } from "../../bench/relayLoad.js"

const step = (calls: number, p99: number, cpu: number, pass: boolean): StepFigures =>
  ({
    calls,
    carrierToAgent: { delayMs: { p99 } },
    agentToCarrier: { delayMs: { p99: p99 / 2 } },
    system: { cpuMsPerCallSecond: cpu },
    pass
  }) as unknown as StepFigures

const system = (name: "gateway" | "baseline", steps: Array<StepFigures>) => ({ system: name, steps }) as unknown as SystemFigures

describe("relay chart", () => {
  it("draws both systems' p99 delay and CPU per call-second against calls, failing steps hollow", () => {
    const svg = relayChartOf(
      system("baseline", [step(25, 1.5, 2.8, true), step(50, 2, 2.6, true), step(75, 80, 2.5, false)]),
      system("gateway", [step(25, 1.7, 3.1, true), step(50, 2.4, 2.9, true)]),
      "a <run>"
    )!
    expect(svg.startsWith("<svg")).toBe(true)
    expect(svg.trim().endsWith("</svg>")).toBe(true)
    // Two panels per system: delay and CPU.
    expect(svg.match(/<polyline/g)).toHaveLength(4)
    expect(svg).toContain("callgate, 50 calls: 2.4")
    expect(svg).toContain("bare relay, 75 calls: 2.5")
    expect(svg).toContain("a &lt;run&gt;")
    expect(svg.match(/fill="white"><title>/g)).toHaveLength(2) // the failing step, in both panels
    for (const calls of [25, 50, 75]) expect(svg).toContain(`>${calls}</text>`)
  })

  it("is left out when nothing was measured", () => {
    expect(relayChartOf(undefined, system("gateway", []), "x")).toBeUndefined()
  })
})
