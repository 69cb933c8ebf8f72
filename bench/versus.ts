/**
 * One commit against another, side by side (docs/benchmarks.md, "One commit against another"):
 * two callgates carrying the same number of calls at once, one built from the working tree (or
 * `--ref`), one from `--against REF`, each with its own simulators. Both are measured in the same
 * windows, so whatever else the machine does weighs on both alike and cannot tip the ratio: the
 * way to tell "no regression" on a shared machine. Figures per side: CPU ms per call-second, and
 * RSS and heap + external per call (after a full collection, against the side's own idle reading).
 */
import { join } from "node:path"
import { BUILD_DIR, buildForBench } from "./build.js"
import { makeBarrier, type RelayLoadOptions, type StepFigures, type SystemFigures, startFeaturePair } from "./relayLoad.js"

export interface VersusWindow {
  readonly againstMsPerCallSecond: number
  readonly currentMsPerCallSecond: number
  /** Current over against. */
  readonly ratio: number
  readonly againstRssPerCallKb: number
  readonly currentRssPerCallKb: number
  readonly againstHeapPerCallKb: number
  readonly currentHeapPerCallKb: number
  /** Heap + external per call without V8's code and bytecode (StepFigures objectsPerCallKb). */
  readonly againstObjectsPerCallKb: number
  readonly currentObjectsPerCallKb: number
  readonly againstOpen: number
  readonly currentOpen: number
}

export interface VersusBenchFigures {
  readonly calls: number
  readonly windowSeconds: number
  /** What each side was built from. */
  readonly current: string
  readonly against: string
  /** Which side's callgate (and simulators) started first (`--swap`: current). */
  readonly startedFirst: "against" | "current"
  readonly windows: ReadonlyArray<VersusWindow>
  /** CPU, pooled over the windows: current over against. */
  readonly ratio: number
  /**
   * The 95 % interval of the windows' ratio (geometric mean of the windows' ratios, Student's t
   * over their logarithms): an interval that holds 1 means the windows cannot tell the two apart.
   * Absent with fewer than two windows.
   */
  readonly ratioInterval?: readonly [number, number]
  readonly againstRssPerCallKb: number
  readonly currentRssPerCallKb: number
  readonly againstHeapPerCallKb: number
  readonly currentHeapPerCallKb: number
  readonly againstObjectsPerCallKb: number
  readonly currentObjectsPerCallKb: number
  /** With `--profile`: each side's CPU profile over the measurement windows. */
  readonly profiles?: { readonly against: SystemFigures["profile"]; readonly current: SystemFigures["profile"] }
}

const round = (value: number, digits = 3) => Math.round(value * 10 ** digits) / 10 ** digits

/** Student's t, two-sided 95 %, by degrees of freedom (1 to 30; beyond, 1.96 is close enough). */
const T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.16, 2.145, 2.131, 2.12, 2.11, 2.101, 2.093, 2.086, 2.08, 2.074, 2.069, 2.064, 2.06, 2.056, 2.052, 2.048, 2.045, 2.042]

/** The 95 % interval of the geometric mean of `ratios` (t over their logarithms). */
export const ratioInterval = (ratios: ReadonlyArray<number>): readonly [number, number] | undefined => {
  const n = ratios.length
  if (n < 2) return undefined
  const logs = ratios.map(Math.log)
  const mean = logs.reduce((a, b) => a + b, 0) / n
  const sd = Math.sqrt(logs.reduce((sum, x) => sum + (x - mean) ** 2, 0) / (n - 1))
  const half = (T95[n - 2] ?? 1.96) * (sd / Math.sqrt(n))
  return [round(Math.exp(mean - half)), round(Math.exp(mean + half))]
}

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

export const runVersusBench = async (options: {
  readonly against: string
  /** The current side: the working tree, or this commit. */
  readonly ref?: string | undefined
  readonly calls: number
  readonly windows: number
  /** Start the current side first (default: the `against` side first). */
  readonly swap?: boolean
  readonly stepSeconds: number
  readonly settleSeconds?: number
  /** Run both callgates under --cpu-prof (profiles land here), and log where their CPU went, side by side. */
  readonly profileDir?: string | undefined
  readonly log?: (line: string) => void
}): Promise<VersusBenchFigures> => {
  const log = options.log ?? (() => {})
  // Builds of their own, beside the main run's (which other parts may be using).
  log(`versus: compiling ${options.ref ?? "the working tree"} and ${options.against}`)
  const current = await buildForBench(options.ref, `${BUILD_DIR}-versus-current`)
  const against = await buildForBench(options.against, `${BUILD_DIR}-versus-against`)
  const relayOptions: RelayLoadOptions = {
    systems: ["gateway"],
    steps: [options.calls],
    stepSeconds: options.stepSeconds,
    settleSeconds: options.settleSeconds ?? 3,
    log
  }
  // The pair's "off" side is started first (and its simulators): `against` unless swapped.
  const swapped = options.swap === true
  const [first, second] = swapped ? [current, against] : [against, current]
  const { off, on } = await startFeaturePair("versus", {
    buildOf: (side) => (side === "on" ? second.dir : first.dir),
    envOf: () => ({ LOG_LEVEL: "warn" }),
    profileDir: options.profileDir
  })
  /** Against, then current, whichever started first. */
  const rigs = swapped ? ([on.rig, off.rig] as const) : ([off.rig, on.rig] as const)
  try {
    await Promise.all(rigs.map((rig) => rig.warmUp(relayOptions)))
    const windows: Array<VersusWindow> = []
    const together = makeBarrier(rigs.length)
    for (let i = 0; i < options.windows; i++) {
      // Each side places the calls, measures one window, reads its memory and hangs up: at once,
      // the windows opened and closed together (the barrier). Which side the driver asks first
      // alternates window by window, so neither is always served first.
      const order = i % 2 === 0 ? [0, 1] : [1, 0]
      const figures: Array<StepFigures> = []
      await Promise.all(order.map(async (k) => void (figures[k] = await rigs[k]!.measure(options.calls, relayOptions, together))))
      const [a, c] = figures as [StepFigures, StepFigures]
      const window: VersusWindow = {
        againstMsPerCallSecond: a.system.cpuMsPerCallSecond,
        currentMsPerCallSecond: c.system.cpuMsPerCallSecond,
        ratio: round(c.system.cpuMsPerCallSecond / a.system.cpuMsPerCallSecond),
        againstRssPerCallKb: a.system.rssPerCallKb,
        currentRssPerCallKb: c.system.rssPerCallKb,
        againstHeapPerCallKb: a.system.heapPerCallKb,
        currentHeapPerCallKb: c.system.heapPerCallKb,
        againstObjectsPerCallKb: a.system.objectsPerCallKb,
        currentObjectsPerCallKb: c.system.objectsPerCallKb,
        againstOpen: a.openCalls,
        currentOpen: c.openCalls
      }
      windows.push(window)
      log(
        `versus ${options.calls} calls, window ${i + 1}/${options.windows}: CPU ms per call-second ${options.against} ${window.againstMsPerCallSecond}, ` +
          `current ${window.currentMsPerCallSecond} (${window.ratio}x); RSS per call ${window.againstRssPerCallKb} / ${window.currentRssPerCallKb} KB, ` +
          `heap + external ${window.againstHeapPerCallKb} / ${window.currentHeapPerCallKb} KB (${window.againstObjectsPerCallKb} / ${window.currentObjectsPerCallKb} KB without code)`
      )
    }
    const sum = (pick: (w: VersusWindow) => number) => windows.reduce((total, w) => total + pick(w), 0)
    const ratio = round(sum((w) => w.currentMsPerCallSecond) / sum((w) => w.againstMsPerCallSecond))
    const interval = ratioInterval(windows.map((w) => w.currentMsPerCallSecond / w.againstMsPerCallSecond))
    log(
      `versus pooled: ${ratio}x` +
        (interval !== undefined ? ` (windows' ratio, 95 % interval ${interval[0]}x to ${interval[1]}x)` : "")
    )
    let profiles: VersusBenchFigures["profiles"]
    if (options.profileDir !== undefined) {
      // The profiles are written when the processes exit.
      await Promise.all(rigs.map((rig) => rig.unload().catch(() => undefined)))
      const [againstProfile, currentProfile] = await Promise.all(rigs.map((rig) => rig.stop().catch(() => undefined)))
      profiles = { against: againstProfile, current: currentProfile }
      logProfileDifference(againstProfile, currentProfile, options.against, log)
    }
    return {
      calls: options.calls,
      windowSeconds: options.stepSeconds,
      current: current.source,
      against: against.source,
      startedFirst: swapped ? "current" : "against",
      windows,
      ratio,
      ...(interval !== undefined ? { ratioInterval: interval } : {}),
      againstRssPerCallKb: median(windows.map((w) => w.againstRssPerCallKb)),
      currentRssPerCallKb: median(windows.map((w) => w.currentRssPerCallKb)),
      againstHeapPerCallKb: median(windows.map((w) => w.againstHeapPerCallKb)),
      currentHeapPerCallKb: median(windows.map((w) => w.currentHeapPerCallKb)),
      againstObjectsPerCallKb: median(windows.map((w) => w.againstObjectsPerCallKb)),
      currentObjectsPerCallKb: median(windows.map((w) => w.currentObjectsPerCallKb)),
      ...(profiles !== undefined ? { profiles } : {})
    }
  } finally {
    await Promise.all(rigs.map((rig) => rig.unload().catch(() => undefined)))
    await Promise.all(rigs.map((rig) => rig.stop().catch(() => undefined)))
  }
}

/**
 * Where the two sides' CPU went: busy time by code area and by function, each side's share of its own
 * busy time, largest differences first (shares, not milliseconds: the two processes were sampled over
 * the same windows but not for exactly the same busy time).
 */
const logProfileDifference = (
  against: SystemFigures["profile"],
  current: SystemFigures["profile"],
  againstName: string,
  log: (line: string) => void
) => {
  if (against === undefined || current === undefined) {
    log("versus: a side wrote no CPU profile")
    return
  }
  log(`versus profiles: ${againstName} ${against.file} (busy ${against.busyMs} ms), current ${current.file} (busy ${current.busyMs} ms)`)
  const compare = (title: string, pick: (profile: NonNullable<SystemFigures["profile"]>) => ReadonlyArray<{ name: string; percent: number }>) => {
    const shares = new Map<string, [number, number]>()
    for (const entry of pick(against)) shares.set(entry.name, [entry.percent, 0])
    for (const entry of pick(current)) shares.set(entry.name, [shares.get(entry.name)?.[0] ?? 0, entry.percent])
    log(`  ${title} (% of busy time, ${againstName} -> current):`)
    for (const [name, [a, c]] of [...shares].sort((x, y) => Math.abs(y[1][1] - y[1][0]) - Math.abs(x[1][1] - x[1][0])).slice(0, 30)) {
      log(`    ${round(a, 1)} -> ${round(c, 1)} (${c >= a ? "+" : ""}${round(c - a, 1)}) ${name}`)
    }
  }
  compare("by area", (profile) => profile.byArea)
  compare("by function", (profile) => profile.topFunctions)
}

/** Where the two builds live (for the docs). */
export const VERSUS_BUILDS = [join(`${BUILD_DIR}-versus-current`, "dist"), join(`${BUILD_DIR}-versus-against`, "dist")]
