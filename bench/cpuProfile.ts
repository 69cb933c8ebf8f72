/**
 * A small reader for V8 `.cpuprofile` files (what `node --cpu-prof` writes at exit): self time by
 * function and by code area, counted only over the samples that fall in the given windows (the
 * benchmark's measurement windows), so start-up and transpiling do not drown the hot path.
 *
 * Sample times are V8 TimeTicks in microseconds: CLOCK_MONOTONIC on Linux, the clock `nowUs()`
 * (process.hrtime) reads, so windows taken in another process line up with the samples.
 *
 *   npx tsx bench/cpuProfile.ts bench/results/gateway-.../CPU....cpuprofile
 */
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs"
import { join, relative } from "node:path"
import { pathToFileURL } from "node:url"
import { repoRoot } from "./benchProcess.js"
import { BUILD_DIR } from "./build.js"

/** Compiled files of the bench build are shown as the sources they come from (node reports real paths: node_modules may be a symlink). */
const BUILT = `${join(existsSync(BUILD_DIR) ? realpathSync(BUILD_DIR) : BUILD_DIR, "dist")}/`

interface ProfileNode {
  readonly id: number
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly children?: ReadonlyArray<number>
}

interface CpuProfile {
  readonly nodes: ReadonlyArray<ProfileNode>
  readonly startTime: number
  readonly endTime: number
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

export interface CpuProfileEntry {
  readonly name: string
  readonly selfMs: number
  /** Percent of the busy (non-idle) time sampled. */
  readonly percent: number
}

export interface CpuProfileSummary {
  /** Wall time covered by the samples counted, and how much of it the main thread was busy. */
  readonly sampledMs: number
  readonly busyMs: number
  /** Whether the windows matched samples (false: the whole profile was counted). */
  readonly windowed: boolean
  /** The windows counted (µs, the profile's clock): for reading the profile again over the same span. */
  readonly windowsUs: ReadonlyArray<readonly [number, number]>
  readonly topFunctions: ReadonlyArray<CpuProfileEntry>
  readonly byArea: ReadonlyArray<CpuProfileEntry>
}

/** The main thread's profile in `dir` (the largest file; worker threads write their own). */
export const findCpuProfile = (dir: string): string | undefined => {
  try {
    return readdirSync(dir)
      .filter((name) => name.endsWith(".cpuprofile"))
      .map((name) => join(dir, name))
      .sort((a, b) => statSync(b).size - statSync(a).size)[0]
  } catch {
    return undefined
  }
}

const shortUrl = (url: string) => {
  if (url === "") return ""
  const path = url.startsWith("file://") ? new URL(url).pathname : url
  if (path.startsWith(BUILT)) return path.slice(BUILT.length).replace(/\.js$/, ".ts")
  const inModules = path.lastIndexOf("/node_modules/")
  if (inModules >= 0) return path.slice(inModules + "/node_modules/".length)
  return path.startsWith("/") ? relative(repoRoot, path) : path
}

/** The code area a function belongs to: a src/ folder, an npm package, Node's internals, or V8's own buckets. */
const areaOf = (node: ProfileNode) => {
  const { functionName, url } = node.callFrame
  if (url === "") return functionName.startsWith("(") ? functionName : "(native)"
  if (url.startsWith("node:")) return "node internals"
  const short = shortUrl(url)
  if (url.includes("/node_modules/") && !url.includes(BUILT)) {
    const parts = short.split("/")
    return `npm ${parts[0]!.startsWith("@") ? `${parts[0]}/${parts[1]}` : parts[0]}`
  }
  const parts = short.split("/")
  return parts.length > 2 ? `${parts[0]}/${parts[1]}` : parts[0]!
}

const IDLE = new Set(["(idle)"])

export const summarizeCpuProfile = (
  file: string,
  options: { readonly windowsUs?: ReadonlyArray<readonly [number, number]>; readonly top?: number } = {}
): CpuProfileSummary => {
  const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]))
  const parents = new Map<number, ProfileNode>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node)
  /** Anonymous functions are named after the nearest named caller, which says more than a file position. */
  const nameOf = (node: ProfileNode): string => {
    const { functionName, url, lineNumber } = node.callFrame
    if (url === "") return functionName || "(native, unnamed)"
    // Compiled files' lines are not the sources' (and tsx emits each module on one line): the
    // project's own functions go by name and file, Node's and packages' by line too.
    const where = `${shortUrl(url)}${lineNumber > 0 && !url.includes(BUILT) ? `:${lineNumber + 1}` : ""}`
    if (functionName !== "") return `${functionName} ${where}`
    let caller = parents.get(node.id)
    while (caller !== undefined && caller.callFrame.functionName === "") caller = parents.get(caller.id)
    return `(anonymous, called by ${caller?.callFrame.functionName ?? "?"}) ${where}`
  }
  const windows = options.windowsUs ?? []
  const inWindow = (t: number) => windows.some(([from, to]) => t >= from && t < to)
  // Samples outside every window: the windows do not line up with this profile's clock; count all.
  let t = profile.startTime
  let matched = 0
  for (const delta of profile.timeDeltas) {
    t += delta
    if (inWindow(t)) matched++
  }
  const windowed = windows.length > 0 && matched > 0

  const byFunction = new Map<string, number>()
  const byArea = new Map<string, number>()
  let sampledUs = 0
  let idleUs = 0
  t = profile.startTime
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i] ?? 0
    if (windowed && !inWindow(t)) continue
    // A sample stands for the time until the next one.
    const duration = profile.timeDeltas[i + 1] ?? profile.timeDeltas[i] ?? 0
    const node = nodes.get(profile.samples[i]!)
    if (node === undefined) continue
    sampledUs += duration
    if (IDLE.has(node.callFrame.functionName)) {
      idleUs += duration
      continue
    }
    const name = nameOf(node)
    byFunction.set(name, (byFunction.get(name) ?? 0) + duration)
    const area = areaOf(node)
    byArea.set(area, (byArea.get(area) ?? 0) + duration)
  }
  const busyUs = sampledUs - idleUs
  const entries = (map: Map<string, number>, limit: number) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, limit)
      .map(([name, us]) => ({ name, selfMs: Math.round(us / 100) / 10, percent: Math.round((us / Math.max(1, busyUs)) * 1000) / 10 }))
  return {
    sampledMs: Math.round(sampledUs / 1000),
    busyMs: Math.round(busyUs / 1000),
    windowed,
    windowsUs: windows,
    topFunctions: entries(byFunction, options.top ?? 20),
    byArea: entries(byArea, 25)
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const file = process.argv[2]
  if (!file) {
    process.stderr.write("usage: npx tsx bench/cpuProfile.ts FILE.cpuprofile\n")
    process.exit(2)
  }
  process.stdout.write(JSON.stringify(summarizeCpuProfile(file), null, 2) + "\n")
}
