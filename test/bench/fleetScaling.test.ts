import { describe, expect, it } from "vitest"
import {
  classifyLimiter,
  coreLayout,
  fleetGrid,
  fleetVerdict,
  type Limiter,
  limiterOf,
  type LimiterReading,
  scalingEfficiency
} from "../../bench/fleetScaling.js"
import type { StepFigures, SystemFigures } from "../../bench/relayLoad.js"

const reading = (overrides: Partial<LimiterReading>): LimiterReading => ({
  calls: 200,
  generatorCpuPercent: [40, 35],
  generatorLatenessMs: 1,
  instanceCpuPercent: [95],
  machineCpuPercent: 250,
  otherCpuPercent: 10,
  cores: 8,
  sharesCores: false,
  ...overrides
})

const step = (calls: number, pass: boolean, sims: [number, number], instances: ReadonlyArray<number>, machine = 200): StepFigures =>
  ({
    calls,
    pass,
    carrierSim: { cpuPercent: sims[0], loopDelayMs: { p99: 1 } },
    agentSim: { cpuPercent: sims[1], loopDelayMs: { p99: 2 } },
    processes: [
      ...instances.map((cpuPercent, i) => ({ name: `callgate-${i + 1}`, role: "system", cpuPercent })),
      { name: "nginx", role: "helper", cpuPercent: 30 }
    ],
    machineCpuPercent: machine,
    otherCpuPercent: 5
  }) as unknown as StepFigures

const ramp = (steps: Array<StepFigures>, stoppedEarly?: string): SystemFigures => {
  const passing = steps.filter((s) => s.pass).map((s) => s.calls)
  return { system: "fleet", idleRssMb: 80, steps, sustainedCalls: passing.length > 0 ? Math.max(...passing) : null, ...(stoppedEarly ? { stoppedEarly } : {}) }
}

const limiter = (kind: Limiter["kind"]): Limiter => ({ kind, atCalls: 100, reason: "" })

describe("fleet scaling efficiency", () => {
  it("is what N instances sustained over N times what one sustained", () => {
    expect(scalingEfficiency(150, 280, 2)).toBe(0.93)
    expect(scalingEfficiency(150, 300, 2)).toBe(1)
    expect(scalingEfficiency(100, 150, 2)).toBe(0.75)
  })

  it("is unknown when either fleet sustained no step", () => {
    expect(scalingEfficiency(null, 280, 2)).toBeNull()
    expect(scalingEfficiency(150, null, 2)).toBeNull()
  })
})

describe("the limiter of a measurement", () => {
  it("is the load generator when a simulator is near a full core, or its timers run late", () => {
    expect(classifyLimiter(reading({ generatorCpuPercent: [80, 40] })).kind).toBe("load generator")
    const late = classifyLimiter(reading({ generatorLatenessMs: 35 }))
    expect(late.kind).toBe("load generator")
    expect(late.reason).toContain("35 ms late")
  })

  it("is the instances when the busiest instance used its core and the generator had room", () => {
    const found = classifyLimiter(reading({ instanceCpuPercent: [92, 70] }))
    expect(found.kind).toBe("instances")
    expect(found.reason).toContain("92 %")
  })

  it("is the load generator when it shares the instances' cores and those were full", () => {
    const shared = reading({ sharesCores: true, cores: 2, machineCpuPercent: 195, instanceCpuPercent: [70, 66] })
    expect(classifyLimiter(shared).kind).toBe("load generator")
    // The same readings with cores of its own, and cores to spare: nothing measured was at a limit.
    expect(classifyLimiter({ ...shared, sharesCores: false, cores: 4 }).kind).toBe("undetermined")
  })

  it("is the rest of the machine when other work used the full cores", () => {
    const busy = classifyLimiter(reading({ sharesCores: true, cores: 2, machineCpuPercent: 199, otherCpuPercent: 160, instanceCpuPercent: [20] }))
    expect(busy.kind).toBe("machine")
    expect(busy.reason).toContain("other processes 160 %")
  })

  it("is undetermined when neither was near its core", () => {
    expect(classifyLimiter(reading({ instanceCpuPercent: [60, 55] })).kind).toBe("undetermined")
  })

  it("is read at the first failing step above the sustained one", () => {
    const figures = ramp([step(100, true, [30, 30], [60]), step(150, true, [40, 40], [80]), step(200, false, [50, 45], [97])])
    expect(limiterOf(figures, 8, false)).toMatchObject({ kind: "instances", atCalls: 200 })
  })

  it("is read at the last step when the ramp stopped there for the load generator", () => {
    const figures = ramp([step(100, true, [50, 40], [60]), step(150, true, [78, 60], [70])], "the load generator is at its limit at 150 calls")
    expect(limiterOf(figures, 8, false)).toMatchObject({ kind: "load generator", atCalls: 150 })
  })

  it("is the step grid when every step passed", () => {
    expect(limiterOf(ramp([step(100, true, [30, 30], [60])]), 8, false)).toMatchObject({ kind: "step grid", atCalls: null })
  })
})

describe("the fleet verdict", () => {
  it("holds the efficiency against 0.9 when the instances were the limit", () => {
    expect(fleetVerdict(0.93, [limiter("instances"), limiter("instances")], false)).toEqual({ judged: true, met: true, text: "met (0.93 >= 0.9)" })
    expect(fleetVerdict(0.8, [limiter("instances"), limiter("instances")], false)).toEqual({ judged: true, met: false, text: "not met (0.8 < 0.9)" })
  })

  it("is not judged when the load generator was the limit of either measurement, and says when it shares cores", () => {
    expect(fleetVerdict(0.7, [limiter("instances"), limiter("load generator")], true)).toEqual({
      judged: false,
      met: null,
      text: "not judged: the load generator was the limit (it shares cores with the instances)"
    })
    expect(fleetVerdict(0.7, [limiter("load generator"), limiter("instances")], false).text).toBe("not judged: the load generator was the limit")
  })

  it("is not judged when other work took the cores, the grid ended before a limit, or nothing was sustained", () => {
    expect(fleetVerdict(0.95, [limiter("instances"), limiter("machine")], false).text).toBe("not judged: other work on the machine took the cores")
    expect(fleetVerdict(1, [limiter("step grid"), limiter("instances")], false).judged).toBe(false)
    expect(fleetVerdict(null, [limiter("instances"), limiter("instances")], false).judged).toBe(false)
  })
})

describe("a fleet whose instances share their cores", () => {
  it("is not judged, whatever the efficiency and the limits read: the premise (a core per instance) does not hold", () => {
    for (const efficiency of [null, 0.5, 0.95]) {
      const verdict = fleetVerdict(efficiency, [limiter("undetermined"), limiter("instances")], true)
      expect(verdict.judged).toBe(false)
      expect(verdict.text).toMatch(/^not judged: the instances have no cores of their own/)
    }
  })
})

describe("the core layout and the two-instance grid", () => {
  it("gives each instance a core and the generator the rest, or says they share", () => {
    expect(coreLayout([0, 1, 2, 3], 2)).toMatchObject({ instanceCores: [0, 1], generatorCpus: "2,3", sharesCores: false })
    const tight = coreLayout([0, 1], 2)
    expect(tight).toMatchObject({ instanceCores: [0, 1], generatorCpus: undefined, sharesCores: true })
    expect(tight.note).toContain("fewer than 2 instances + the load generator")
    expect(() => coreLayout([0], 2)).toThrow(/a core per instance/)
  })

  it("lies around twice what one instance sustained, or doubles the one-instance grid", () => {
    expect(fleetGrid(150, 2, [0.8, 0.9, 1], [50, 100])).toEqual([240, 270, 300])
    expect(fleetGrid(null, 2, [0.8, 0.9, 1], [10, 40])).toEqual([20, 80])
  })
})
