/**
 * The fleet figure's arithmetic (docs/benchmarks.md, "The fleet figure"), apart from the processes
 * that measure it: the scaling efficiency of a fleet, what limited each measurement (the load
 * generator or the instances), the verdict against the goal, the core layout, and the grid of the
 * larger fleet. Pure: bench/fleet.ts measures, this judges.
 */
import { GENERATOR_MAX_CPU_PERCENT, GENERATOR_MAX_LATENESS_MS, type StepFigures, type SystemFigures } from "./relayLoad.js"

/** The goal: N instances sustain at least 90 % of N times what one sustains. */
export const EFFICIENCY_GOAL = 0.9
/** An instance using this much of its core (percent) is at its limit. */
export const INSTANCE_BUSY_PERCENT = 85
/** The machine's cores are full when the whole machine used this share of them. */
export const CORES_FULL_SHARE = 0.9
/** Other processes using more than this (percent of one core) while the cores were full took them (the relay ramp re-measures above it too). */
export const OTHER_BUSY_PERCENT = 50

/** calls sustained by N instances / (N x calls sustained by 1 instance), two decimals; null when either is unknown. */
export const scalingEfficiency = (oneInstance: number | null, fleet: number | null, instances: number): number | null =>
  oneInstance === null || oneInstance <= 0 || fleet === null ? null : Math.round((fleet / (instances * oneInstance)) * 100) / 100

/** Where the instances, the load generator and the rest run: one core per instance, the generator on the cores left, if any. */
export interface CoreLayout {
  /** Core of each instance of the largest fleet (instance i runs on `instanceCores[i]`). */
  readonly instanceCores: ReadonlyArray<number>
  /** Cores of the load generator, nginx and Redis (taskset list), or undefined: they share the instances' cores. */
  readonly generatorCpus: string | undefined
  /** True when the machine has fewer cores than instances + one for the generator. */
  readonly sharesCores: boolean
  /** One line for the report. */
  readonly note: string
}

export const coreLayout = (allowed: ReadonlyArray<number>, instances: number): CoreLayout => {
  if (allowed.length < instances) {
    throw new Error(`the fleet figure needs a core per instance: ${instances} instances, ${allowed.length} core(s) available`)
  }
  const instanceCores = allowed.slice(0, instances)
  const rest = allowed.slice(instances)
  const cores = instanceCores.map(String).join(" and ")
  if (rest.length === 0) {
    return {
      instanceCores,
      generatorCpus: undefined,
      sharesCores: true,
      note:
        `${allowed.length} cores, fewer than ${instances} instances + the load generator: the instances are pinned to cores ${cores}; ` +
        "the load generator, nginx and Redis share those cores with them"
    }
  }
  return {
    instanceCores,
    generatorCpus: rest.join(","),
    sharesCores: false,
    note: `${allowed.length} cores: the instances are pinned to cores ${cores}; the load generator, nginx and Redis to core(s) ${rest.join(",")}`
  }
}

/**
 * The larger fleet's grid: around N times what one instance sustained (where the goal is told
 * apart), or N times the one-instance grid when it sustained nothing.
 */
export const fleetGrid = (oneInstance: number | null, instances: number, factors: ReadonlyArray<number>, oneInstanceGrid: ReadonlyArray<number>): ReadonlyArray<number> => {
  const raw = oneInstance === null ? oneInstanceGrid.map((calls) => calls * instances) : factors.map((f) => Math.round(f * instances * oneInstance))
  return [...new Set(raw.filter((calls) => calls >= 1))].sort((a, b) => a - b)
}

export type LimiterKind = "load generator" | "instances" | "machine" | "step grid" | "undetermined"

export interface Limiter {
  readonly kind: LimiterKind
  /** The step it was read at (the first failing step above the sustained one), if any. */
  readonly atCalls: number | null
  readonly reason: string
}

/** What a step's readings say about who was at a limit. */
export interface LimiterReading {
  readonly calls: number
  /** Each simulator process's CPU, percent of one core (process.cpuUsage in the simulator). */
  readonly generatorCpuPercent: ReadonlyArray<number>
  /** The simulators' worst timer lateness p99, ms. */
  readonly generatorLatenessMs: number
  /** Each instance's CPU, percent of its core (/proc). */
  readonly instanceCpuPercent: ReadonlyArray<number>
  /** The whole machine's CPU, percent of one core, and its cores. */
  readonly machineCpuPercent: number
  /** What processes other than the fleet and the generator used (other work on the machine), percent of one core. */
  readonly otherCpuPercent: number
  readonly cores: number
  /** The generator has no core of its own: it shares the instances'. */
  readonly sharesCores: boolean
}

/**
 * In this order: the load generator is the limit when a simulator is near a full core (the relay
 * ramp's own "at its limit": over 75 %, or its timers over 20 ms late); the instances are when the
 * busiest one used 85 % of its core. Otherwise, with the machine's cores full: other work is when
 * it used over half a core, else the load generator is when it shares the instances' cores (it
 * took the time they lacked). Otherwise nothing measured was at a limit (nginx, Redis).
 */
export const classifyLimiter = (r: LimiterReading): Limiter => {
  const sims = r.generatorCpuPercent.map((c) => `${c} %`).join(" / ")
  const busiest = r.instanceCpuPercent.length > 0 ? Math.max(...r.instanceCpuPercent) : 0
  const instances = r.instanceCpuPercent.map((c) => `${c} %`).join(" / ")
  const readings = `simulators ${sims}, instances ${instances}, other processes ${r.otherCpuPercent} %`
  const at = (kind: LimiterKind, reason: string): Limiter => ({ kind, atCalls: r.calls, reason: `at ${r.calls} calls ${reason}` })
  if (r.generatorCpuPercent.some((c) => c > GENERATOR_MAX_CPU_PERCENT)) {
    return at("load generator", `a simulator was near a full core (simulators ${sims} of a core, timers up to ${r.generatorLatenessMs} ms late)`)
  }
  if (r.generatorLatenessMs > GENERATOR_MAX_LATENESS_MS) {
    return at("load generator", `the simulators' timers ran up to ${r.generatorLatenessMs} ms late: they could not keep the cadence (${readings})`)
  }
  if (busiest >= INSTANCE_BUSY_PERCENT) return at("instances", `the busiest instance used ${busiest} % of its core (${readings})`)
  const full = r.machineCpuPercent >= CORES_FULL_SHARE * r.cores * 100
  if (full && r.otherCpuPercent > OTHER_BUSY_PERCENT) {
    return at("machine", `the machine's ${r.cores} cores were full (${r.machineCpuPercent} % of one core) with other work on them (${readings})`)
  }
  if (full && r.sharesCores) {
    return at("load generator", `the machine's ${r.cores} cores were full (${r.machineCpuPercent} % of one core) and the load generator shares them with the instances (${readings})`)
  }
  return at("undetermined", `neither a simulator nor an instance was near its core (${readings})`)
}

/** The reading of one step of a fleet's ramp. */
export const limiterReadingOf = (step: StepFigures, cores: number, sharesCores: boolean): LimiterReading => ({
  calls: step.calls,
  generatorCpuPercent: [step.carrierSim.cpuPercent, step.agentSim.cpuPercent],
  generatorLatenessMs: Math.max(step.carrierSim.loopDelayMs.p99, step.agentSim.loopDelayMs.p99),
  instanceCpuPercent: (step.processes ?? []).filter((p) => p.role === "system").map((p) => p.cpuPercent),
  machineCpuPercent: step.machineCpuPercent,
  otherCpuPercent: step.otherCpuPercent,
  cores,
  sharesCores
})

/**
 * What limited a fleet's ramp, read at the step where the limit bit: the first step above the
 * sustained one that did not pass, or the last step when the ramp stopped there because the load
 * generator was at its limit. Every step passing is the step grid's limit, not the fleet's.
 */
export const limiterOf = (figures: SystemFigures, cores: number, sharesCores: boolean): Limiter => {
  const sustained = figures.sustainedCalls ?? 0
  const failing = figures.steps.find((s) => !s.pass && s.calls > sustained)
  const last = figures.steps.at(-1)
  const step = failing ?? (figures.stoppedEarly !== undefined ? last : undefined)
  if (step === undefined) {
    return {
      kind: "step grid",
      atCalls: null,
      reason: last === undefined ? "no step was measured" : `every step passed, up to ${last.calls} calls: the grid ended before the limit`
    }
  }
  return classifyLimiter(limiterReadingOf(step, cores, sharesCores))
}

export interface FleetVerdict {
  /** Whether the efficiency was held against the goal. */
  readonly judged: boolean
  readonly met: boolean | null
  /** "met (e >= 0.9)", "not met (e < 0.9)", or "not judged: why". */
  readonly text: string
}

/**
 * The efficiency against the goal, unless the load generator was the limit of either measurement,
 * the instances shared their cores with it, other work on the machine was the limit, or the grid
 * ended first.
 */
export const fleetVerdict = (efficiency: number | null, limiters: ReadonlyArray<Limiter>, sharesCores: boolean): FleetVerdict => {
  const notJudged = (why: string): FleetVerdict => ({ judged: false, met: null, text: `not judged: ${why}` })
  if (limiters.some((l) => l.kind === "load generator")) {
    return notJudged(`the load generator was the limit${sharesCores ? " (it shares cores with the instances)" : ""}`)
  }
  // Each instance on a core of its own is the figure's premise; without it the delays are the scheduler's.
  if (sharesCores) return notJudged("the instances have no cores of their own (the load generator, nginx and Redis share them): a judged figure needs a core per instance and more for the generator")
  if (limiters.some((l) => l.kind === "machine")) return notJudged("other work on the machine took the cores")
  if (limiters.some((l) => l.kind === "step grid")) return notJudged("every step passed: the grid ended before a fleet's limit (larger steps)")
  if (efficiency === null) return notJudged("a fleet sustained no step")
  const met = efficiency >= EFFICIENCY_GOAL
  return { judged: true, met, text: met ? `met (${efficiency} >= ${EFFICIENCY_GOAL})` : `not met (${efficiency} < ${EFFICIENCY_GOAL})` }
}
