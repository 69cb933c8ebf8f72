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
import { type RelayLoadOptions, type StepFigures, type SystemFigures, startFeaturePair } from "./relayLoad.js"

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
  readonly windows: ReadonlyArray<VersusWindow>
  /** CPU, pooled over the windows: current over against. */
  readonly ratio: number
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
  const { off, on } = await startFeaturePair("versus", {
    buildOf: (side) => (side === "on" ? current.dir : against.dir),
    envOf: () => ({ LOG_LEVEL: "warn" }),
    profileDir: options.profileDir
  })
  const rigs = [off.rig, on.rig] as const
  try {
    await Promise.all(rigs.map((rig) => rig.warmUp(relayOptions)))
    const windows: Array<VersusWindow> = []
    for (let i = 0; i < options.windows; i++) {
      // Each side places the calls, measures one window, reads its memory and hangs up: at once.
      const [a, c] = (await Promise.all(rigs.map((rig) => rig.measure(options.calls, relayOptions)))) as [StepFigures, StepFigures]
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
      windows,
      ratio: round(sum((w) => w.currentMsPerCallSecond) / sum((w) => w.againstMsPerCallSecond)),
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
