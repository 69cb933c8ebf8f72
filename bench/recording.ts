/**
 * Call recording's cost (docs/recording.md, "Cost"): two callgate processes carrying the same
 * calls at once, one whose environment records every call to disk and one whose does not; CPU per
 * call-second of each (the same side-by-side method as measureSideBySide), and the write system
 * calls per call per second: callgate's own count of its recording writes (one pwrite each), and
 * the kernel's count of every write-family system call of each process (/proc/PID/io `syscw`),
 * whose difference between the two processes is what recording adds.
 */
import { type Dirent, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { sleep } from "./benchProcess.js"
import { msPerCallSecond, type RelayLoadOptions, startFeaturePair, type SystemFigures } from "./relayLoad.js"

export interface RecordingWindow {
  readonly offMsPerCallSecond: number
  readonly onMsPerCallSecond: number
  /** Recording on over recording off. */
  readonly ratio: number
  readonly onOpen: number
  readonly offOpen: number
  /** callgate's count of recording writes, per call per second. */
  readonly recordingWritesPerCallSecond: number
  /** Write-family system calls of each process (kernel count), per call per second. */
  readonly onSyscwPerCallSecond: number
  readonly offSyscwPerCallSecond: number
}

export interface RecordingBenchFigures {
  readonly calls: number
  readonly windowSeconds: number
  readonly windows: ReadonlyArray<RecordingWindow>
  /** Windows left out of the pooled figures: fewer than 90 % of the calls were up on a side (the machine could not carry them). */
  readonly skippedWindows: number
  /** Pooled over the windows in which both sides carried the calls (NaN when none did). */
  readonly ratio: number
  readonly recordingWritesPerCallSecond: number
  readonly extraSyscwPerCallSecond: number
  /** Bytes of recordings written by the "on" process (a check that it recorded). */
  readonly recordedBytes: number
  /** With `--profile`: each process's CPU profile over the measurement windows. */
  readonly profiles?: { readonly off: SystemFigures["profile"]; readonly on: SystemFigures["profile"] }
}

const round = (value: number, digits = 2) => Math.round(value * 10 ** digits) / 10 ** digits

const syscwOf = (pid: number): number => {
  const match = /^syscw:\s+(\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, "utf8"))
  return match ? Number(match[1]) : Number.NaN
}

const recordingWritesOf = async (baseUrl: string): Promise<number> => {
  const text = await (await fetch(`${baseUrl}/metrics`)).text()
  const match = /^callgate_recording_writes_total (\d+(?:\.\d+)?)$/m.exec(text)
  return match ? Number(match[1]) : 0
}

const bytesUnder = (dir: string): number => {
  let total = 0
  const walk = (path: string) => {
    for (const entry of readdirSync(path, { withFileTypes: true }) as Array<Dirent>) {
      const child = join(path, entry.name)
      if (entry.isDirectory()) walk(child)
      else if (entry.name.endsWith(".wav")) total += statSync(child).size
    }
  }
  try {
    walk(dir)
  } catch {
    // nothing recorded
  }
  return total
}

export const runRecordingBench = async (options: {
  readonly calls: number
  readonly windows: number
  readonly stepSeconds: number
  readonly settleSeconds?: number
  readonly build?: string | undefined
  /** Run both callgates under --cpu-prof (profiles land here). */
  readonly profileDir?: string | undefined
  readonly log?: (line: string) => void
}): Promise<RecordingBenchFigures> => {
  const log = options.log ?? (() => {})
  const dir = mkdtempSync(join(tmpdir(), "callgate-bench-recordings-"))
  const relayOptions: RelayLoadOptions = {
    systems: ["gateway"],
    steps: [options.calls],
    stepSeconds: options.stepSeconds,
    settleSeconds: options.settleSeconds ?? 3,
    build: options.build,
    log
  }
  const { off, on } = await startFeaturePair("recording", {
    build: options.build,
    envOf: (recording) => ({ RECORDINGS_DIR: join(dir, recording), LOG_LEVEL: "warn" }),
    settingsOf: (recording) => ({ recording }),
    profileDir: options.profileDir
  })
  const rigs = [off.rig, on.rig] as const
  try {
    await Promise.all(rigs.map((rig) => rig.warmUp(relayOptions)))
    await Promise.all(rigs.map((rig) => rig.load(options.calls, relayOptions)))
    const windows: Array<RecordingWindow> = []
    for (let i = 0; i < options.windows; i++) {
      // callgate's write count is scraped from both processes (the same work on each), outside the
      // CPU window: a /metrics scrape costs a callgate more than its recording does in a second.
      const writesBefore = (await Promise.all([recordingWritesOf(on.gateway.baseUrl), recordingWritesOf(off.gateway.baseUrl)]))[0]!
      const scrapedAt = performance.now()
      const opened = await Promise.all(rigs.map((rig) => rig.openWindow()))
      const before = { on: syscwOf(on.gateway.pid), off: syscwOf(off.gateway.pid) }
      await sleep(options.stepSeconds * 1000)
      const after = { on: syscwOf(on.gateway.pid), off: syscwOf(off.gateway.pid) }
      const [o, r] = await Promise.all(rigs.map((rig, k) => rig.closeWindow(opened[k]!, relayOptions)))
      const writesAfter = (await Promise.all([recordingWritesOf(on.gateway.baseUrl), recordingWritesOf(off.gateway.baseUrl)]))[0]!
      const scrapedSeconds = (performance.now() - scrapedAt) / 1000
      const perCallSecond = (value: number, open: number, seconds: number) => value / (Math.max(1, open) * seconds)
      const offMs = msPerCallSecond(o!)
      const onMs = msPerCallSecond(r!)
      const window: RecordingWindow = {
        offMsPerCallSecond: round(offMs, 3),
        onMsPerCallSecond: round(onMs, 3),
        ratio: round(onMs / offMs, 3),
        onOpen: r!.carrierWindow.open,
        offOpen: o!.carrierWindow.open,
        // The calls stay up between the two scrapes (the window, and the frames' settling after it).
        recordingWritesPerCallSecond: round(perCallSecond(writesAfter - writesBefore, r!.carrierWindow.open, scrapedSeconds), 3),
        onSyscwPerCallSecond: round(perCallSecond(after.on - before.on, r!.carrierWindow.open, options.stepSeconds), 2),
        offSyscwPerCallSecond: round(perCallSecond(after.off - before.off, o!.carrierWindow.open, options.stepSeconds), 2)
      }
      windows.push(window)
      log(
        `recording ${options.calls} calls, window ${i + 1}/${options.windows}: CPU ms per call-second off ${window.offMsPerCallSecond}, ` +
          `on ${window.onMsPerCallSecond} (${window.ratio}x); recording writes ${window.recordingWritesPerCallSecond} per call-second; ` +
          `write syscalls per call-second on ${window.onSyscwPerCallSecond}, off ${window.offSyscwPerCallSecond}`
      )
    }
    // Per call-second figures of a window whose calls had dropped say nothing (a few calls share the process's fixed costs).
    const carried = windows.filter((w) => Math.min(w.onOpen, w.offOpen) >= options.calls * 0.9)
    const sum = (pick: (w: RecordingWindow) => number) => carried.reduce((total, w) => total + pick(w), 0)
    const recordedBytes = bytesUnder(join(dir, "on"))
    let profiles: RecordingBenchFigures["profiles"]
    if (options.profileDir !== undefined) {
      // The profiles are written when the processes exit.
      await Promise.all(rigs.map((rig) => rig.unload().catch(() => undefined)))
      const [offProfile, onProfile] = await Promise.all(rigs.map((rig) => rig.stop().catch(() => undefined)))
      profiles = { off: offProfile, on: onProfile }
      for (const [state, profile] of [["off", offProfile], ["on", onProfile]] as const) {
        if (profile === undefined) continue
        log(`recording ${state}: profile ${profile.file}; busy ${round(profile.busyMs)} of ${round(profile.sampledMs)} ms sampled`)
        for (const entry of profile.topFunctions.slice(0, 25)) log(`  ${round(entry.selfMs)} ms ${round(entry.percent, 1)} % ${entry.name}`)
      }
    }
    return {
      calls: options.calls,
      windowSeconds: options.stepSeconds,
      windows,
      skippedWindows: windows.length - carried.length,
      ratio: round(sum((w) => w.onMsPerCallSecond) / sum((w) => w.offMsPerCallSecond), 3),
      recordingWritesPerCallSecond: round(sum((w) => w.recordingWritesPerCallSecond) / carried.length, 3),
      extraSyscwPerCallSecond: round(sum((w) => w.onSyscwPerCallSecond - w.offSyscwPerCallSecond) / carried.length, 2),
      recordedBytes,
      ...(profiles !== undefined ? { profiles } : {})
    }
  } finally {
    await Promise.all(rigs.map((rig) => rig.unload().catch(() => undefined)))
    await Promise.all(rigs.map((rig) => rig.stop().catch(() => undefined)))
    rmSync(dir, { recursive: true, force: true })
  }
}
