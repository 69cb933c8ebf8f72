/**
 * The relay measurement: for each system (callgate, the bare relay) three processes, the system
 * under test, a carrier simulator (carrierSim.ts) and an agent simulator (agentSim.ts), and a
 * ramp of rising concurrent calls. The systems' steps interleave (bare relay at N calls, callgate
 * at N, then both at the next N), so machine load that drifts over minutes hits both alike. At
 * each step the calls are placed, left to settle, measured over a steady-state window of
 * `stepSeconds`, and hung up:
 *
 * - frames sent, delivered and lost in each direction, and the one-way delay of the frames sent
 *   in the window (stamp send time to receipt, shared monotonic clock), see frameLedger.ts;
 * - the system's CPU per call-second (from /proc/<pid>), and its memory per call: RSS and V8 heap
 *   plus external memory after a full garbage collection (inspector.ts), against the same taken
 *   idle after a warm-up;
 * - each simulator's own CPU and event-loop delay (when they are saturated, the figures say so).
 *
 * A step passes with under 0.1 % of frames lost and p99 delay under 5 ms in both directions and
 * no call failed or cut; the ramp stops once a step clearly fails (over 2 % lost, p99 over 50 ms,
 * calls that cannot be placed) or a simulator is at its limit (over 75 % of its core, or timers
 * over 20 ms late), since it could not generate a larger step faithfully. A window during which the rest
 * of the machine was busy (other processes: a shared machine) is measured again, once.
 *
 * After the ramp, with both systems, CPU per call-second side by side (measureSideBySide): both
 * carry the same calls at once, so the host's drift between two windows cannot tip the ratio.
 */
import { join } from "node:path"
import { nowUs } from "../sim/FrameStamp.js"
import type { AgentTarget } from "./agentSim.js"
import { cpuSecondsOf, forkWorker, machineBusySeconds, pinProcess, sleep, type Worker } from "./benchProcess.js"
import type { CarrierTarget } from "./carrierSim.js"
import { type CpuProfileSummary, findCpuProfile, summarizeCpuProfile } from "./cpuProfile.js"
import type { DirectionFigures, SentRanges } from "./frameLedger.js"
import type { LoadGeneratorFigures } from "./loadStats.js"
import { type MemoryReading, measureMemory } from "./inspector.js"
import { createBenchEnvironment, type RunningSystem, startBaselineRelay, startGateway } from "./systemUnderTest.js"

export const PASS_LOSS_PERCENT = 0.1
export const PASS_P99_MS = 5
/** A window during which the rest of the machine used more than this (percent of one core) is measured again, once. */
const BUSY_MACHINE_PERCENT = 50
/** At most this many windows are measured again in one run, so a busy machine cannot stretch it much. */
const MAX_REMEASURES = 4
/** A step this bad ends the ramp: larger steps would only be worse and slow the run down. */
const FAIL_LOSS_PERCENT = 2
const FAIL_P99_MS = 50
/**
 * A simulator this busy (percent of its one core) or this late (timer lateness p99, ms) cannot
 * generate a larger step faithfully: its pacers would fall behind and catch up in bursts.
 */
export const GENERATOR_MAX_CPU_PERCENT = 75
export const GENERATOR_MAX_LATENESS_MS = 20

export interface RelayLoadOptions {
  /** The systems to measure; with both, their steps interleave (bare relay N, callgate N, ...). */
  readonly systems: ReadonlyArray<"gateway" | "baseline">
  readonly steps: ReadonlyArray<number>
  readonly stepSeconds: number
  /** Wait after the calls of a step are up, before measuring. Default 3 s. */
  readonly settleSeconds?: number
  /** Wait after the window for frames still in flight. Default 1.5 s. */
  readonly graceSeconds?: number
  /** New calls per second while ramping up. Default 100. */
  readonly rampPerSecond?: number
  /** Run callgate under --cpu-prof and write the profile here. */
  readonly profileDir?: string
  /** Take every step even after a clear failure (relative CPU figures on a busy machine). */
  readonly fullRamp?: boolean
  /**
   * With both systems: after the ramp, CPU per call-second with both carrying these many calls at
   * once (measureSideBySide), `sideBySideWindows` windows of `stepSeconds` each (default 3).
   */
  readonly sideBySideSteps?: ReadonlyArray<number>
  readonly sideBySideWindows?: number
  /** Compiled tree to run the systems from (build.ts); default: the sources through tsx. */
  readonly build?: string
  readonly log?: (line: string) => void
}

export interface StepFigures {
  /** Calls asked for, and open at the end of the window. */
  readonly calls: number
  readonly openCalls: number
  readonly failedSetups: number
  readonly setupErrors: ReadonlyArray<string>
  /** Calls the system (or the agent side) ended during the window. */
  readonly callsCut: number
  readonly windowSeconds: number
  readonly carrierToAgent: DirectionFigures
  readonly agentToCarrier: DirectionFigures
  readonly system: {
    readonly cpuPercent: number
    /** CPU milliseconds the system process used per second of one call. */
    readonly cpuMsPerCallSecond: number
    /** RSS with the calls up, after a full garbage collection. */
    readonly rssMb: number
    /** (RSS now - idle RSS) / open calls, both after a full collection. */
    readonly rssPerCallKb: number
    /** The same for V8 heap in use plus external memory (Buffers): what the calls' objects hold. */
    readonly heapPerCallKb: number
    /** The same without V8's code and bytecode (MemoryReading.codeBytes), which do not grow with calls: the calls' objects alone. */
    readonly objectsPerCallKb: number
  }
  /**
   * Each process measured, when the system is more than one (a fleet: its instances, and nginx and
   * Redis as helpers): CPU in percent of one core. `system.cpuPercent` sums the system's own.
   */
  readonly processes?: ReadonlyArray<{ readonly name: string; readonly role: ProcessRole; readonly cpuPercent: number }>
  readonly carrierSim: LoadGeneratorFigures
  readonly agentSim: LoadGeneratorFigures
  /** The whole machine's CPU during the window, percent of one core (cores x 100: every core busy). */
  readonly machineCpuPercent: number
  /**
   * CPU the rest of the machine used during the window (other processes, the kernel's own work,
   * hypervisor steal), percent of one core: when high, delays are the machine's, not the relay's.
   */
  readonly otherCpuPercent: number
  /** Set when a first window was measured again because the rest of the machine was busy (its other CPU %). */
  readonly remeasuredAfterOtherCpuPercent?: number
  /** Caller turns spoken, answers the callers heard, replies the agents sent (all within the window). */
  readonly turns: { readonly spoken: number; readonly answered: number; readonly replies: number }
  readonly pass: boolean
  /** Why the step did not pass (empty when it did). */
  readonly problems: ReadonlyArray<string>
}

export interface SystemFigures {
  readonly system: "gateway" | "baseline" | "fleet"
  /** After a warm-up call and a full collection, with no call up. */
  readonly idleRssMb: number
  readonly steps: ReadonlyArray<StepFigures>
  /** The largest step that passed (null: none did). */
  readonly sustainedCalls: number | null
  /** Why the ramp ended before the last step, if it did. */
  readonly stoppedEarly?: string
  readonly profile?: CpuProfileSummary & { readonly file: string }
}

export interface RelayLoadResults {
  readonly gateway?: SystemFigures | { readonly error: string }
  readonly baseline?: SystemFigures | { readonly error: string }
  readonly sideBySide?: SideBySideFigures | { readonly error: string }
}

const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits

interface CarrierWindow {
  readonly ranges: SentRanges
  readonly load: LoadGeneratorFigures
  readonly open: number
  readonly turns: number
  readonly answers: number
  readonly closedByGateway: number
}

interface AgentWindow {
  readonly ranges: SentRanges
  readonly load: LoadGeneratorFigures
  readonly turns: number
  readonly replies: number
  readonly callsEnded: number
}

/** A measurement window in progress (RelayRig.openWindow). */
interface OpenWindow {
  readonly openedUs: number
  readonly pids: ReadonlyArray<ReadonlyArray<number>>
  readonly simPids: ReadonlyArray<number>
  readonly cpuBefore: ReadonlyArray<Map<number, number>>
  readonly simsBefore: Map<number, number>
  readonly machineBefore: number
  readonly startedAt: number
}

/** What one window measured (RelayRig.closeWindow): CPU in seconds, frames per direction. */
interface ClosedWindow {
  readonly carrierWindow: CarrierWindow
  readonly agentWindow: AgentWindow
  readonly windowSeconds: number
  /** CPU seconds of each of the system's processes. */
  readonly perProcess: ReadonlyArray<number>
  /** CPU seconds of the system's own processes (helpers left out). */
  readonly cpuSeconds: number
  readonly machineSeconds: number
  /** CPU seconds of the system's processes and its simulators. */
  readonly oursSeconds: number
  readonly carrierToAgent: DirectionFigures
  readonly agentToCarrier: DirectionFigures
}

/** CPU milliseconds the system used per second of one open call, over a window. */
export const msPerCallSecond = (window: ClosedWindow) => (window.cpuSeconds * 1000) / (Math.max(1, window.carrierWindow.open) * window.windowSeconds)

const judge = (step: Omit<StepFigures, "pass" | "problems">): ReadonlyArray<string> => {
  const problems: Array<string> = []
  for (const [name, d] of [
    ["carrier->agent", step.carrierToAgent],
    ["agent->carrier", step.agentToCarrier]
  ] as const) {
    if (!(d.lossPercent < PASS_LOSS_PERCENT)) problems.push(`${name} lost ${d.lossPercent} %`)
    if (!(d.delayMs.p99 < PASS_P99_MS)) problems.push(`${name} p99 ${d.delayMs.p99} ms`)
  }
  if (step.failedSetups > 0) problems.push(`${step.failedSetups} calls failed to connect`)
  if (step.callsCut > 0) problems.push(`${step.callsCut} calls cut`)
  return problems
}

/** Why the ramp ends after this step, if it does: the system clearly failed, or the load generator is at its limit. */
const rampEnd = (step: StepFigures): string | undefined => {
  if (
    [step.carrierToAgent, step.agentToCarrier].some((d) => !(d.lossPercent < FAIL_LOSS_PERCENT) || !(d.delayMs.p99 < FAIL_P99_MS)) ||
    step.failedSetups > Math.max(2, step.calls * 0.02)
  ) {
    return `${step.calls} calls clearly failed (${step.problems.join(", ")})`
  }
  const busiest = [step.carrierSim, step.agentSim].reduce((a, b) => (a.cpuPercent >= b.cpuPercent ? a : b))
  const latest = Math.max(step.carrierSim.loopDelayMs.p99, step.agentSim.loopDelayMs.p99)
  if (busiest.cpuPercent > GENERATOR_MAX_CPU_PERCENT || latest > GENERATOR_MAX_LATENESS_MS) {
    return `the load generator is at its limit at ${step.calls} calls (a simulator at ${busiest.cpuPercent} % CPU, timers up to ${latest} ms late)`
  }
  return undefined
}

/** A process is the system's own (its CPU is the system's) or a helper the system needs (a fleet's nginx, Redis). */
export type ProcessRole = "system" | "helper"

/** One process whose CPU a step reads from /proc; `pids` are read when a window opens (nginx: master and workers). */
export interface MeasuredProcess {
  readonly name: string
  readonly role: ProcessRole
  readonly pids: () => ReadonlyArray<number>
}

/** What a rig measures, started by the caller and stopped by the rig. */
export interface RigSystem {
  readonly processes: ReadonlyArray<MeasuredProcess>
  /** Memory after a full collection, summed over the system's processes (inspector.ts). */
  readonly memory: () => Promise<MemoryReading>
  /** Whether it still runs and what it last wrote, for error reports. */
  readonly describe: () => string
  readonly stop: () => Promise<void>
}

export interface RigOptions {
  readonly carrierTarget: CarrierTarget
  readonly agentTarget: AgentTarget
  /** Dial-in agent sockets kept beyond the calls (callgate reserves one idle socket per call). */
  readonly spareAgents: number
  /** Cores the simulator processes run on (`taskset`), when they have cores of their own. */
  readonly generatorCpus?: string
  readonly profileRunDir?: string
}

const describeProcess = (name: string, system: RunningSystem) => {
  const { child } = system
  const state = child.exitCode !== null || child.signalCode !== null ? `exited (${child.signalCode ?? child.exitCode})` : "running"
  const out = "stdout" in system ? (system as { stdout: () => string }).stdout().split("\n").slice(-6).join("\n") : ""
  return `${name} is ${state}; its last output:\n${out}\n${system.stderr().slice(-2000)}`
}

/** One running system (callgate, the bare relay) as a rig measures it. */
export const rigSystemOf = (name: string, system: RunningSystem): RigSystem => ({
  processes: [{ name, role: "system", pids: () => [system.pid] }],
  memory: () => measureMemory(system.inspectorUrl!, system.pid),
  describe: () => describeProcess(name, system),
  stop: () => system.stop()
})

/** Several running processes (a fleet's instances) as one system: CPU each, memory summed. */
export const rigSystemOfMany = (
  systems: ReadonlyArray<{ readonly name: string; readonly system: RunningSystem }>,
  helpers: ReadonlyArray<MeasuredProcess>,
  stop: () => Promise<void>
): RigSystem => ({
  processes: [...systems.map(({ name, system }) => ({ name, role: "system" as const, pids: () => [system.pid] })), ...helpers],
  memory: async () => {
    const readings = await Promise.all(systems.map(({ system }) => measureMemory(system.inspectorUrl!, system.pid)))
    return readings.reduce((a, b) => ({
      rssBytes: a.rssBytes + b.rssBytes,
      heapUsedBytes: a.heapUsedBytes + b.heapUsedBytes,
      externalBytes: a.externalBytes + b.externalBytes,
      codeBytes: a.codeBytes + b.codeBytes
    }))
  },
  describe: () => systems.map(({ name, system }) => describeProcess(name, system)).join("\n"),
  stop
})

/** CPU seconds of each pid now (a pid gone meanwhile is left out). */
const cpuOfPids = (pids: ReadonlyArray<number>): Map<number, number> => {
  const seconds = new Map<number, number>()
  for (const pid of pids) {
    try {
      seconds.set(pid, cpuSecondsOf(pid))
    } catch {
      // exited
    }
  }
  return seconds
}
const cpuBetween = (before: Map<number, number>, after: Map<number, number>) =>
  [...after].reduce((sum, [pid, seconds]) => sum + (before.has(pid) ? seconds - before.get(pid)! : 0), 0)

/**
 * One system with its two simulators, kept up for the whole ramp. `measure(calls)` places the
 * calls, measures one window and hangs the calls up again, so the systems' steps can interleave.
 */
export class RelayRig {
  readonly windows: Array<readonly [number, number]> = []
  idle: MemoryReading | undefined

  private constructor(
    readonly name: string,
    private readonly system: RigSystem,
    private readonly carriers: Worker,
    private readonly agents: Worker,
    private readonly options: RigOptions
  ) {}

  /** callgate (embedded store) or the bare relay, started here, with its simulators. */
  static async start(name: "gateway" | "baseline", build: string | undefined, profileRunDir: string | undefined): Promise<RelayRig> {
    if (name === "gateway") {
      const gateway = await startGateway({ build, inspect: true, nodeArgs: profileRunDir ? ["--cpu-prof", "--cpu-prof-dir", profileRunDir] : [] })
      try {
        const agentId = "bench_agent"
        const { environmentId, apiKey } = await createBenchEnvironment(gateway, agentId)
        return await RelayRig.around(name, rigSystemOf("callgate", gateway), {
          carrierTarget: { mode: "gateway", gatewayUrl: gateway.baseUrl, agentId, environmentId },
          agentTarget: { mode: "gateway", gatewayUrl: gateway.baseUrl, agentId, environmentId, apiKey },
          spareAgents: 2,
          ...(profileRunDir ? { profileRunDir } : {})
        })
      } catch (error) {
        await gateway.stop()
        throw error
      }
    }
    const relay = await startBaselineRelay({ build, inspect: true })
    return RelayRig.around(name, rigSystemOf("bare relay", relay), {
      carrierTarget: { mode: "relay", relayUrl: relay.url },
      agentTarget: { mode: "relay", relayUrl: relay.url },
      spareAgents: 0
    })
  }

  /** A system started by the caller, with two simulators set up against it; on failure the system is stopped too. */
  static async around(name: string, system: RigSystem, options: RigOptions): Promise<RelayRig> {
    const carriers = forkWorker("bench/carrierSim.ts")
    const agents = forkWorker("bench/agentSim.ts")
    const rig = new RelayRig(name, system, carriers, agents, options)
    try {
      if (options.generatorCpus !== undefined) for (const worker of [carriers, agents]) pinProcess(worker.pid, options.generatorCpus)
      await Promise.all([carriers.request("setup", { target: options.carrierTarget }), agents.request("setup", { target: options.agentTarget })])
      return rig
    } catch (error) {
      await rig.stop().catch(() => undefined)
      throw error
    }
  }

  /**
   * A few calls for a few seconds (code paths loaded and compiled, pools warmed), hung up, then
   * the idle memory every step is compared with.
   */
  async warmUp(options: RelayLoadOptions): Promise<MemoryReading> {
    await this.agents.request("grow", { to: 5 }, 60_000)
    await this.carriers.request("grow", { to: 5, perSecond: options.rampPerSecond ?? 100, concurrency: 5 }, 60_000)
    await sleep(3000)
    await this.carriers.request("hangupAll", {}, 60_000)
    await sleep(1000)
    this.idle = await this.system.memory()
    return this.idle
  }

  /**
   * `together`: a barrier shared with rigs measured at the same time (makeBarrier). Each waits
   * there once its calls are placed and once its window is closed, so their windows cover the
   * same span and no rig's ramp, collection or hang-up falls into another's window.
   */
  async measure(calls: number, options: RelayLoadOptions, together?: () => Promise<void>): Promise<StepFigures> {
    const grown = await this.load(calls, options)
    await together?.()
    const window = await this.openWindow()
    await sleep(options.stepSeconds * 1000)
    const closed = await this.closeWindow(window, options)
    await together?.()
    // The collection pauses the system: only now that the window's frames are all accounted for.
    const memory = await this.system.memory()
    await this.unload()

    const { carrierWindow, agentWindow, windowSeconds, cpuSeconds, perProcess } = closed
    const open = carrierWindow.open
    const idle = this.idle!
    const perCallKb = (bytes: number) => round(bytes / 1024 / Math.max(1, open))
    const measured: Omit<StepFigures, "pass" | "problems"> = {
      calls,
      openCalls: open,
      failedSetups: grown.failed,
      setupErrors: grown.errors,
      callsCut: Math.max(carrierWindow.closedByGateway, agentWindow.callsEnded),
      windowSeconds: round(windowSeconds, 2),
      carrierToAgent: closed.carrierToAgent,
      agentToCarrier: closed.agentToCarrier,
      system: {
        cpuPercent: round((cpuSeconds / windowSeconds) * 100),
        cpuMsPerCallSecond: round(msPerCallSecond(closed), 3),
        rssMb: round(memory.rssBytes / 2 ** 20),
        rssPerCallKb: perCallKb(memory.rssBytes - idle.rssBytes),
        heapPerCallKb: perCallKb(memory.heapUsedBytes + memory.externalBytes - idle.heapUsedBytes - idle.externalBytes),
        objectsPerCallKb: perCallKb(memory.heapUsedBytes + memory.externalBytes - memory.codeBytes - (idle.heapUsedBytes + idle.externalBytes - idle.codeBytes))
      },
      ...(this.system.processes.length > 1
        ? {
            processes: this.system.processes.map((p, i) => ({ name: p.name, role: p.role, cpuPercent: round((perProcess[i]! / windowSeconds) * 100) }))
          }
        : {}),
      carrierSim: carrierWindow.load,
      agentSim: agentWindow.load,
      machineCpuPercent: round((closed.machineSeconds / windowSeconds) * 100),
      otherCpuPercent: round(Math.max(0, (closed.machineSeconds - closed.oursSeconds) / windowSeconds) * 100),
      turns: { spoken: carrierWindow.turns, answered: carrierWindow.answers, replies: agentWindow.replies }
    }
    const problems = judge(measured)
    return { ...measured, pass: problems.length === 0, problems }
  }

  /**
   * Places `calls` calls and lets them settle. Agents first: callgate hands each call an idle
   * dial-in socket; the relay pairs by key.
   */
  async load(calls: number, options: RelayLoadOptions): Promise<{ readonly open: number; readonly failed: number; readonly errors: ReadonlyArray<string> }> {
    // Placing the calls takes calls / rampPerSecond seconds; four times that (and a minute) is a generator in trouble.
    const rampBudgetMs = 60_000 + (4000 * calls) / (options.rampPerSecond ?? 100)
    await this.agents.request("grow", { to: calls + this.options.spareAgents }, rampBudgetMs + 60_000)
    const grown = await this.carriers.request<{ open: number; failed: number; errors: Array<string> }>(
      "grow",
      { to: calls, perSecond: options.rampPerSecond ?? 100, concurrency: 16 },
      rampBudgetMs
    )
    await sleep((options.settleSeconds ?? 3) * 1000)
    return grown
  }

  /** Makes sure `sockets` dial-in agent sockets are open and idle (those of ended calls reopen). */
  async offerAgents(sockets: number): Promise<void> {
    await this.agents.request("grow", { to: sockets }, 120_000)
  }

  /** Starts a measurement window: the simulators record what they send; CPU is read from /proc. */
  async openWindow(): Promise<OpenWindow> {
    const { carriers, agents, system } = this
    await Promise.all([carriers.request("record"), agents.request("record")])
    await Promise.all([carriers.request("windowOpen"), agents.request("windowOpen")])
    const pids = system.processes.map((p) => p.pids())
    const simPids = [carriers.pid, agents.pid]
    return {
      openedUs: nowUs(),
      pids,
      simPids,
      cpuBefore: pids.map(cpuOfPids),
      simsBefore: cpuOfPids(simPids),
      machineBefore: machineBusySeconds(),
      startedAt: performance.now()
    }
  }

  /** Ends the window: the CPU used in it, then (after the grace for frames in flight) the frames' figures. */
  async closeWindow(window: OpenWindow, options: RelayLoadOptions): Promise<ClosedWindow> {
    const { carriers, agents, system } = this
    const [carrierWindow, agentWindow] = await Promise.all([
      carriers.request<CarrierWindow>("windowClose"),
      agents.request<AgentWindow>("windowClose")
    ])
    const windowSeconds = (performance.now() - window.startedAt) / 1000
    const perProcess = window.pids.map((list, i) => cpuBetween(window.cpuBefore[i]!, cpuOfPids(list)))
    const simSeconds = cpuBetween(window.simsBefore, cpuOfPids(window.simPids))
    const machineSeconds = machineBusySeconds() - window.machineBefore
    const cpuSeconds = perProcess.reduce((sum, seconds, i) => sum + (system.processes[i]!.role === "system" ? seconds : 0), 0)
    const oursSeconds = perProcess.reduce((a, b) => a + b, 0) + simSeconds
    this.windows.push([window.openedUs, nowUs()])

    await sleep((options.graceSeconds ?? 1.5) * 1000)
    const [agentToCarrier, carrierToAgent] = await Promise.all([
      carriers.request<DirectionFigures>("settle", { ranges: agentWindow.ranges }),
      agents.request<DirectionFigures>("settle", { ranges: carrierWindow.ranges })
    ])
    return { carrierWindow, agentWindow, windowSeconds, perProcess, cpuSeconds, machineSeconds, oursSeconds, carrierToAgent, agentToCarrier }
  }

  /** Hangs every call up and gives the system a moment to let go of them. */
  async unload(): Promise<void> {
    await this.carriers.request("hangupAll", {}, 60_000)
    await sleep(1000)
  }

  /** Whether the system still runs and what it last wrote (for error reports). */
  describeSystem(): string {
    return this.system.describe()
  }

  /** Stops the simulators, then the system (callgate writes its CPU profile as it exits). */
  async stop(): Promise<SystemFigures["profile"]> {
    await this.carriers.stop().catch(() => undefined)
    await this.agents.stop().catch(() => undefined)
    await this.system.stop()
    const dir = this.options.profileRunDir
    const file = dir ? findCpuProfile(dir) : undefined
    return file ? { file, ...summarizeCpuProfile(file, { windowsUs: this.windows, top: 80 }) } : undefined
  }
}

/**
 * A reusable barrier for `parties` tasks: each call resolves once every party has called, round
 * after round.
 */
export const makeBarrier = (parties: number): (() => Promise<void>) => {
  let waiting: Array<() => void> = []
  return () =>
    new Promise<void>((resolve) => {
      waiting.push(resolve)
      if (waiting.length < parties) return
      const all = waiting
      waiting = []
      for (const release of all) release()
    })
}

/** One window of the side-by-side CPU measurement: both systems carrying the same calls at once. */
export interface SideBySideWindow {
  readonly baselineMsPerCallSecond: number
  readonly gatewayMsPerCallSecond: number
  /** callgate's CPU per call-second over the bare relay's. */
  readonly ratio: number
  readonly baselineOpen: number
  readonly gatewayOpen: number
  /** The worst loss and p99 delay of either system in either direction: whether the calls carried their traffic. */
  readonly worstLossPercent: number
  readonly worstP99Ms: number
  /** The whole machine's CPU during the window, percent of one core. */
  readonly machineCpuPercent: number
}

export interface SideBySideStep {
  readonly calls: number
  readonly windows: ReadonlyArray<SideBySideWindow>
  /** The windows pooled: callgate's CPU per call-second summed over the relay's, summed. */
  readonly ratio: number
}

export interface SideBySideFigures {
  readonly windowSeconds: number
  readonly steps: ReadonlyArray<SideBySideStep>
}

/**
 * CPU per call-second of callgate against the bare relay with both carrying `calls` calls at the
 * same time, over `windows` back-to-back windows: whatever the host does meanwhile (a neighbour,
 * frequency, the hypervisor) it does to both, which one system after the other cannot promise
 * (docs/benchmarks.md, "CPU side by side"). Delays are not judged here: the machine carries twice
 * the calls, so they belong to the ramp.
 */
export const measureSideBySide = async (
  gateway: RelayRig,
  baseline: RelayRig,
  calls: number,
  windows: number,
  options: RelayLoadOptions
): Promise<SideBySideStep> => {
  const rigs = [baseline, gateway] as const
  try {
    await Promise.all(rigs.map((rig) => rig.load(calls, options)))
    const measured: Array<SideBySideWindow> = []
    for (let i = 0; i < windows; i++) {
      const open = await Promise.all(rigs.map((rig) => rig.openWindow()))
      await sleep(options.stepSeconds * 1000)
      const [b, g] = await Promise.all(rigs.map((rig, k) => rig.closeWindow(open[k]!, options)))
      const directions = [b!.carrierToAgent, b!.agentToCarrier, g!.carrierToAgent, g!.agentToCarrier]
      measured.push({
        baselineMsPerCallSecond: round(msPerCallSecond(b!), 3),
        gatewayMsPerCallSecond: round(msPerCallSecond(g!), 3),
        ratio: round(msPerCallSecond(g!) / msPerCallSecond(b!), 2),
        baselineOpen: b!.carrierWindow.open,
        gatewayOpen: g!.carrierWindow.open,
        worstLossPercent: Math.max(...directions.map((d) => d.lossPercent)),
        worstP99Ms: Math.max(...directions.map((d) => d.delayMs.p99)),
        machineCpuPercent: round((Math.max(b!.machineSeconds, g!.machineSeconds) / Math.max(b!.windowSeconds, g!.windowSeconds)) * 100)
      })
      options.log?.(
        `side by side ${calls} calls, window ${i + 1}/${windows}: CPU ms per call-second relay ${measured[i]!.baselineMsPerCallSecond}, ` +
          `callgate ${measured[i]!.gatewayMsPerCallSecond} (${measured[i]!.ratio}x); worst loss ${measured[i]!.worstLossPercent} %, p99 ${measured[i]!.worstP99Ms} ms`
      )
    }
    const sum = (pick: (w: SideBySideWindow) => number) => measured.reduce((total, w) => total + pick(w), 0)
    return { calls, windows: measured, ratio: round(sum((w) => w.gatewayMsPerCallSecond) / sum((w) => w.baselineMsPerCallSecond), 2) }
  } finally {
    await Promise.all(rigs.map((rig) => rig.unload().catch(() => undefined)))
  }
}

const describeStep = (name: string, step: StepFigures) => {
  const { carrierToAgent: c, agentToCarrier: a } = step
  return (
    `${name} ${step.calls} calls: ${step.pass ? "pass" : `FAIL (${step.problems.join(", ")})`}; ` +
    `c->a p50/p99 ${c.delayMs.p50}/${c.delayMs.p99} ms lost ${c.lost}/${c.sent}; a->c p50/p99 ${a.delayMs.p50}/${a.delayMs.p99} ms lost ${a.lost}/${a.sent}; ` +
    `cpu ${step.system.cpuPercent} %, rss ${step.system.rssMb} MB; sims cpu ${step.carrierSim.cpuPercent}/${step.agentSim.cpuPercent} %; ` +
    `rest of the machine ${step.otherCpuPercent} %`
  )
}

/** Windows measured again in one run, shared by every rig of the run (at most MAX_REMEASURES). */
export interface RemeasureBudget {
  used: number
}

/**
 * One step of one rig: measured, and measured once more (the second reading stands) when the rest
 * of the machine was busy during the window and the run's budget allows. `end` says why the ramp
 * should end after it, if it should (rampEnd).
 */
export const takeStep = async (
  rig: RelayRig,
  calls: number,
  options: RelayLoadOptions,
  budget: RemeasureBudget
): Promise<{ readonly step: StepFigures; readonly end: string | undefined }> => {
  const log = options.log ?? (() => {})
  let step = await rig.measure(calls, options)
  log(describeStep(rig.name, step))
  if (step.otherCpuPercent > BUSY_MACHINE_PERCENT && budget.used < MAX_REMEASURES) {
    budget.used++
    // Someone else's work took the cores: once more, and the second reading stands.
    log(`${rig.name} ${calls} calls: the rest of the machine used ${step.otherCpuPercent} % of a core; measuring again`)
    step = { ...(await rig.measure(calls, options)), remeasuredAfterOtherCpuPercent: step.otherCpuPercent }
    log(describeStep(rig.name, step))
  }
  return { step, end: rampEnd(step) }
}

export const summarize = (name: SystemFigures["system"], idleRss: number | undefined, steps: ReadonlyArray<StepFigures>, stoppedEarly: string | undefined): SystemFigures => {
  const passing = steps.filter((s) => s.pass).map((s) => s.calls)
  return {
    system: name,
    idleRssMb: idleRss === undefined ? NaN : round(idleRss / 2 ** 20),
    steps,
    sustainedCalls: passing.length > 0 ? Math.max(...passing) : null,
    ...(stoppedEarly ? { stoppedEarly } : {})
  }
}

/**
 * Measures every system asked for at every step, interleaved step by step so both see the
 * machine in the same state; a system whose step clearly failed takes no further steps.
 */
export const runRelayLoad = async (options: RelayLoadOptions): Promise<RelayLoadResults> => {
  const log = options.log ?? (() => {})
  const rigs = new Map<"gateway" | "baseline", RelayRig>()
  const results: { -readonly [K in keyof RelayLoadResults]: RelayLoadResults[K] } = {}
  /** Rigs that failed (not merely ended their ramp): no side-by-side windows with them. */
  const broken = new Set<"gateway" | "baseline">()
  const steps = new Map<"gateway" | "baseline", Array<StepFigures>>()
  const stopped = new Map<"gateway" | "baseline", string>()
  const budget: RemeasureBudget = { used: 0 }
  try {
    for (const name of options.systems) {
      try {
        const profileRunDir = name === "gateway" && options.profileDir ? join(options.profileDir, `gateway-${Date.now()}`) : undefined
        rigs.set(name, await RelayRig.start(name, options.build, profileRunDir))
        steps.set(name, [])
      } catch (error) {
        results[name] = { error: (error as Error).message }
        log(`${name}: could not start: ${(error as Error).message}`)
      }
    }
    for (const [name, rig] of [...rigs]) {
      try {
        const idle = await rig.warmUp(options)
        log(`${name}: warmed up; idle RSS ${round(idle.rssBytes / 2 ** 20)} MB, heap + external ${round((idle.heapUsedBytes + idle.externalBytes) / 2 ** 20)} MB`)
      } catch (error) {
        stopped.set(name, `warm-up failed: ${(error as Error).message.split("\n")[0]}`)
        broken.add(name)
        log(`${name}: warm-up failed: ${(error as Error).message}`)
      }
    }
    for (const calls of options.steps) {
      for (const [name, rig] of rigs) {
        if (stopped.has(name)) continue
        try {
          const { step, end } = await takeStep(rig, calls, options, budget)
          steps.get(name)!.push(step)
          if (end !== undefined && options.fullRamp !== true) stopped.set(name, end)
        } catch (error) {
          stopped.set(name, `${calls} calls: ${(error as Error).message.split("\n")[0]}`)
          broken.add(name)
          log(`${name} ${calls} calls: ERROR ${(error as Error).message}\n${rig.describeSystem()}`)
        }
      }
      if ([...rigs.keys()].every((name) => stopped.has(name))) break
    }
    const gateway = rigs.get("gateway")
    const baseline = rigs.get("baseline")
    const sideBySideSteps = options.sideBySideSteps ?? []
    if (gateway !== undefined && baseline !== undefined && !broken.has("gateway") && !broken.has("baseline") && sideBySideSteps.length > 0) {
      const sideBySide: Array<SideBySideStep> = []
      try {
        for (const calls of sideBySideSteps) sideBySide.push(await measureSideBySide(gateway, baseline, calls, options.sideBySideWindows ?? 3, options))
        results.sideBySide = { windowSeconds: options.stepSeconds, steps: sideBySide }
      } catch (error) {
        log(`side by side: ERROR ${(error as Error).message}`)
        results.sideBySide = { error: (error as Error).message }
      }
    }
  } finally {
    for (const [name, rig] of rigs) {
      const profile = await rig.stop().catch(() => undefined)
      const figures = summarize(name, rig.idle?.rssBytes, steps.get(name) ?? [], stopped.get(name))
      results[name] = profile ? { ...figures, profile } : figures
    }
  }
  return results
}

/**
 * Two callgates side by side, one with a feature off and one with it on, each with its own relay rig
 * (the feature benches: tracing, recording). `envOf` gives each process its settings; `settingsOf`,
 * the bench environment's fields.
 */
export const startFeaturePair = async (
  feature: string,
  options: {
    readonly build?: string | undefined
    /** A build per side (versus.ts: one commit against another); default `build` for both. */
    readonly buildOf?: (state: "off" | "on") => string | undefined
    readonly envOf: (state: "off" | "on") => Record<string, string>
    readonly settingsOf?: (state: "off" | "on") => object
    /** Run both callgates under --cpu-prof, each writing its profile into a folder of this one (`--profile`). */
    readonly profileDir?: string | undefined
  }
) => {
  const start = async (state: "off" | "on") => {
    const build = options.buildOf !== undefined ? options.buildOf(state) : options.build
    const profileRunDir = options.profileDir !== undefined ? join(options.profileDir, `${feature}-${state}-${Date.now()}`) : undefined
    const gateway = await startGateway({
      build,
      inspect: true,
      env: options.envOf(state),
      nodeArgs: profileRunDir !== undefined ? ["--cpu-prof", "--cpu-prof-dir", profileRunDir] : []
    })
    try {
      const agentId = "bench_agent"
      const { environmentId, apiKey } = await createBenchEnvironment(gateway, agentId, options.settingsOf?.(state) ?? {})
      const rig = await RelayRig.around(`${feature} ${state}`, rigSystemOf(`callgate (${feature} ${state})`, gateway), {
        carrierTarget: { mode: "gateway", gatewayUrl: gateway.baseUrl, agentId, environmentId },
        agentTarget: { mode: "gateway", gatewayUrl: gateway.baseUrl, agentId, environmentId, apiKey },
        spareAgents: 2,
        ...(profileRunDir !== undefined ? { profileRunDir } : {})
      })
      return { gateway, rig }
    } catch (error) {
      await gateway.stop()
      throw error
    }
  }
  const off = await start("off")
  const on = await start("on").catch(async (error) => {
    await off.rig.stop()
    throw error
  })
  return { off, on }
}
