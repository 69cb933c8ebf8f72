/**
 * `npm run bench`: callgate measured against a bare relay in one run, plus the fleet's scaling
 * efficiency and the webhook, breaker and fallback figures, written to bench/results/ (latest.md, latest.json and a timestamped copy)
 * and printed. Every part runs in processes of its own; all of them stop by themselves.
 *
 *   npm run bench                          # the default run (about 20 minutes on 2 cores)
 *   npm run bench -- --quick               # a 3 minute smoke run
 *   npm run bench -- --only fleet          # the fleet's scaling efficiency alone
 *   npm run bench -- --only redis          # Redis commands and CPU per call set-up and per call-second
 *   npm run bench -- --only formats        # CPU per call-second of a PCMU, PCMA, L16 8 kHz and 16 kHz Telnyx call
 *   npm run bench -- --steps 100,200,400 --step-seconds 30 --only gateway,baseline --profile
 *
 * See docs/benchmarks.md for what each figure means.
 */
import { cpus, loadavg, totalmem } from "node:os"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { forkWorker, repoRoot } from "./benchProcess.js"
import { runFleetBench } from "./fleet.js"
import { buildForBench } from "./build.js"
import { relayChartOf } from "./chart.js"
import { type BenchResults, compare, isError, type Machine, type PartError, renderMarkdown } from "./report.js"
import { runRecordingBench } from "./recording.js"
import { runFormatsBench } from "./formats.js"
import { runRedisCostBench } from "./redisCost.js"
import { runTracingBench } from "./tracing.js"
import { runVersusBench } from "./versus.js"
import { runRelayLoad, type SystemFigures } from "./relayLoad.js"

const PARTS = ["baseline", "gateway", "fleet", "webhooks", "breaker", "fallback", "shedding", "failover", "recording", "formats", "tracing", "versus", "redis"] as const
/** Calls both callgates carry at once in the tracing part (OTLP export of every span against tracing off). */
const TRACING_CALLS = 50
const QUICK_TRACING_CALLS = 20
/** Calls each build carries at once in the versus part (the larger of the CPU steps). */
const VERSUS_CALLS = 100
const QUICK_VERSUS_CALLS = 20
/** Calls each format's callgate carries in the formats part (PCMU, PCMA, L16 8 and 16 kHz, all at once). */
const FORMATS_CALLS = 20
const QUICK_FORMATS_CALLS = 10
/** Calls both callgates carry at once in the recording part (recording on against off). */
const RECORDING_CALLS = 50
const QUICK_RECORDING_CALLS = 20
/** The redis part (what one Redis carries): calls held steady, call set-ups placed at a rate and hung up, then the set-ups again with a replica. */
const REDIS_SETUPS = { setups: 120, perSecond: 20, steadyCalls: 60, idleSeconds: 10 }
const QUICK_REDIS_SETUPS = { setups: 40, perSecond: 20, steadyCalls: 20, idleSeconds: 5 }

/**
 * The default ramp: steps of 25 calls from 25 to 200, around where both systems' knee lies on a
 * 2-core machine (fine enough to tell 90 % of the relay's capacity), then coarser. A system stops
 * at its first clearly failing step.
 */
const DEFAULT_STEPS = [25, 50, 75, 100, 125, 150, 175, 200, 250, 300, 400]
/**
 * Where CPU per call-second is judged against the relay's (the 50 and 100 calls): both
 * systems carrying the calls at once, so the host's drift between one system's window and the
 * other's cannot tip the ratio (docs/benchmarks.md, "CPU side by side").
 */
const CPU_STEPS = [50, 100]
const QUICK_CPU_STEPS = [40]
/**
 * The fleet part's one-instance grid (one pinned core: its knee lies between 100 and 250 on the
 * bench machine), and the two-instance grid as multiples of twice what one instance sustained,
 * fine around the goal of 0.9.
 */
const FLEET_STEPS = [50, 75, 100, 125, 150, 175, 200, 225, 250, 300]
const FLEET_FACTORS = [0.6, 0.8, 0.85, 0.9, 0.95, 1, 1.1]
const QUICK_FLEET_STEPS = [10, 40]
const QUICK_FLEET_FACTORS = [0.9, 1]
type Part = (typeof PARTS)[number]

const USAGE = `Usage: npm run bench -- [options]

  --quick               smoke run, about 3 minutes (small steps, short windows, small parts)
  --steps LIST          concurrent-call steps for both relays (default 25 to 200 by 25, then 250,300,400)
  --fleet-steps LIST    the fleet part's one-instance steps (default ${FLEET_STEPS.join(",")}; quick ${QUICK_FLEET_STEPS.join(",")});
                        two instances take steps around twice what one sustained
  --step-seconds S      measured steady state per step (default 15)
  --cpu-steps LIST      calls at which both systems run side by side, at once, for their CPU per
                        call-second (default 50,100; quick 40), three windows of step-seconds each
                        (quick: one); "none" to skip
  --only LIST           parts to run, of ${PARTS.join(", ")} (default all)
  --windows N           windows of the side-by-side parts (recording, formats, tracing, versus; default 3, quick 1):
                        more windows, a pooled ratio less moved by what else the machine does
  --full-ramp           take every step even after one clearly failed (for CPU per call-second
                        side by side on a busy machine, where delays fail early)
  --profile             run callgate under --cpu-prof; the profile and its summary land in bench/results/
  --tsx                 run callgate and the bare relay from the sources through tsx (npm run dev)
                        instead of compiled JavaScript on plain node (npm start), the default
  --ref REF             build and measure commit REF (e.g. HEAD) instead of the working tree
  --against REF         the versus part: the working tree (or --ref) and commit REF side by side, CPU
                        per call-second and memory per call of each (only with --only versus)
  --swap                the versus part: start the current side first (default: REF's side first); a run
                        each way, their ratios' geometric mean, cancels what starting second does
  --out DIR             results directory (default bench/results)
  --help`

interface Settings {
  readonly quick: boolean
  readonly steps: ReadonlyArray<number>
  readonly cpuSteps: ReadonlyArray<number>
  readonly fleetSteps: ReadonlyArray<number>
  readonly stepSeconds: number
  readonly parts: ReadonlyArray<Part>
  readonly profile: boolean
  readonly fullRamp: boolean
  /** Windows of the side-by-side parts; undefined: the default. */
  readonly windows: number | undefined
  readonly tsx: boolean
  readonly ref: string | undefined
  readonly against: string | undefined
  readonly swap: boolean
  readonly out: string
}

const parseArgs = (argv: ReadonlyArray<string>): Settings => {
  const flags = new Map<string, string>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (!arg.startsWith("--")) throw new Error(`unexpected argument ${arg}`)
    const [name, inline] = arg.slice(2).split("=", 2) as [string, string | undefined]
    const next = argv[i + 1]
    if (inline !== undefined) flags.set(name, inline)
    else if (next !== undefined && !next.startsWith("--")) flags.set(name, (i++, next))
    else flags.set(name, "true")
  }
  const known = new Set(["quick", "steps", "cpu-steps", "fleet-steps", "step-seconds", "only", "windows", "profile", "full-ramp", "tsx", "ref", "against", "swap", "out", "help"])
  for (const name of flags.keys()) if (!known.has(name)) throw new Error(`unknown option --${name}`)
  if (flags.has("help")) {
    process.stdout.write(`${USAGE}\n`)
    process.exit(0)
  }
  const quick = flags.has("quick")
  const numbers = (text: string, name: string) =>
    text.split(",").map((part) => {
      const n = Number(part)
      if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} takes positive integers, got "${part}"`)
      return n
    })
  const steps = flags.has("steps") ? numbers(flags.get("steps")!, "steps") : quick ? [10, 40] : DEFAULT_STEPS
  const cpuSteps =
    flags.get("cpu-steps") === "none" ? [] : flags.has("cpu-steps") ? numbers(flags.get("cpu-steps")!, "cpu-steps") : quick ? QUICK_CPU_STEPS : CPU_STEPS
  const fleetSteps = flags.has("fleet-steps") ? numbers(flags.get("fleet-steps")!, "fleet-steps") : quick ? QUICK_FLEET_STEPS : FLEET_STEPS
  const stepSeconds = flags.has("step-seconds") ? Number(flags.get("step-seconds")) : quick ? 5 : 15
  if (!(stepSeconds >= 1)) throw new Error(`--step-seconds takes a number of seconds >= 1`)
  if (flags.has("tsx") && flags.has("ref")) throw new Error("--ref builds a commit; --tsx runs the working tree's sources: pick one")
  const parts = flags.has("only")
    ? flags
        .get("only")!
        .split(",")
        .map((part) => {
          if (!(PARTS as ReadonlyArray<string>).includes(part)) throw new Error(`--only takes ${PARTS.join(", ")}; got "${part}"`)
          return part as Part
        })
    : PARTS.filter((part) => part !== "versus")
  const windows = flags.has("windows") ? numbers(flags.get("windows")!, "windows")[0] : undefined
  const against = flags.get("against")
  if (parts.includes("versus") !== (against !== undefined)) throw new Error("the versus part and --against REF go together")
  if (flags.has("swap") && against === undefined) throw new Error("--swap goes with the versus part (--only versus --against REF)")
  return { against, swap: flags.has("swap"), quick, steps: [...steps].sort((a, b) => a - b), cpuSteps, fleetSteps: [...fleetSteps].sort((a, b) => a - b), stepSeconds, parts, profile: flags.has("profile"), fullRamp: flags.has("full-ramp"), windows, tsx: flags.has("tsx"), ref: flags.get("ref"), out: flags.get("out") ?? join(repoRoot, "bench/results") }
}

const machine = (atStart: number): Machine => ({
  cores: cpus().length,
  cpuModel: cpus()[0]?.model.trim() ?? "unknown",
  node: process.version,
  platform: `${process.platform} ${process.arch}`,
  memoryGb: Math.round(totalmem() / 2 ** 30),
  loadAverage: { atStart, atEnd: Math.round(loadavg()[0]! * 100) / 100 }
})

const log = (line: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`)

/** One self-contained part in a process of its own. */
const runPart = async <T>(part: string, options: object, timeoutMs: number): Promise<T> => {
  const worker = forkWorker("bench/partWorker.ts")
  try {
    return await worker.request<T>("run", { part, options }, timeoutMs)
  } finally {
    await worker.stop(5000)
  }
}

const attempt = async <T>(name: string, run: () => Promise<T>): Promise<T | PartError> => {
  log(`${name}: starting`)
  const started = performance.now()
  try {
    const result = await run()
    log(`${name}: done in ${Math.round((performance.now() - started) / 1000)} s`)
    return result
  } catch (error) {
    log(`${name}: FAILED: ${(error as Error).message}`)
    return { error: (error as Error).message }
  }
}

const main = async () => {
  const settings = parseArgs(process.argv.slice(2))
  const startedAt = new Date()
  const loadAtStart = Math.round(loadavg()[0]! * 100) / 100
  const has = (part: Part) => settings.parts.includes(part)
  const q = settings.quick

  mkdirSync(settings.out, { recursive: true })
  const results: { -readonly [K in keyof BenchResults]: BenchResults[K] } = {
    startedAt: startedAt.toISOString(),
    durationSeconds: 0,
    machine: machine(loadAtStart),
    settings: {
      steps: settings.steps,
      cpuSteps: settings.cpuSteps,
      stepSeconds: settings.stepSeconds,
      parts: settings.parts,
      quick: q,
      profile: settings.profile,
      runtime: settings.tsx ? "tsx" : "node",
      source: "working tree (sources through tsx)"
    }
  }
  const needsBuild = !settings.tsx && (has("baseline") || has("gateway") || has("fleet") || has("fallback") || has("shedding") || has("failover") || has("recording") || has("formats") || has("tracing") || has("redis"))
  let build: string | undefined
  if (needsBuild) {
    log(`compiling ${settings.ref ?? "the working tree"} (tsc --noCheck into node_modules/.cache/callgate-bench)`)
    const built = await buildForBench(settings.ref)
    build = built.dir
    results.settings = { ...results.settings, source: built.source }
  }
  const systems = (["baseline", "gateway"] as const).filter(has)
  if (systems.length > 0) {
    const relay = await attempt(`relay (${systems.join(" and ")}, interleaved)`, () =>
      runRelayLoad({
        systems,
        steps: settings.steps,
        stepSeconds: settings.stepSeconds,
        settleSeconds: q ? 1.5 : 3,
        ...(settings.profile ? { profileDir: settings.out } : {}),
        fullRamp: settings.fullRamp,
        sideBySideSteps: settings.cpuSteps,
        sideBySideWindows: q ? 1 : 3,
        build,
        log
      })
    )
    for (const system of systems) results[system] = isError(relay) ? relay : relay[system]
    if (!isError(relay) && relay.sideBySide !== undefined) results.sideBySide = relay.sideBySide
  }
  if (results.baseline && results.gateway && !isError(results.baseline) && !isError(results.gateway)) {
    results.comparison = compare(
      results.baseline as SystemFigures,
      results.gateway as SystemFigures,
      results.sideBySide === undefined || isError(results.sideBySide) ? undefined : results.sideBySide
    )
  }
  if (has("fleet")) {
    results.fleet = await attempt("fleet (1 instance, then 2, behind nginx)", () =>
      runFleetBench({
        oneInstanceSteps: settings.fleetSteps,
        fleetFactors: q ? QUICK_FLEET_FACTORS : FLEET_FACTORS,
        stepSeconds: settings.stepSeconds,
        settleSeconds: q ? 1.5 : 3,
        fullRamp: settings.fullRamp,
        build,
        log
      })
    )
  }
  /** The windows every side-by-side part (recording, formats, tracing, versus) measures in. */
  const pairedWindows = { windows: settings.windows ?? (q ? 1 : 3), stepSeconds: settings.stepSeconds, settleSeconds: q ? 1.5 : 3 }
  if (has("recording")) {
    results.recording = await attempt("recording (callgate with recording on and off, side by side)", () =>
      runRecordingBench({
        calls: q ? QUICK_RECORDING_CALLS : RECORDING_CALLS,
        ...pairedWindows,
        build,
        ...(settings.profile ? { profileDir: settings.out } : {}),
        log
      })
    )
  }
  if (has("formats")) {
    results.formats = await attempt("formats (a callgate per Telnyx audio format, side by side)", () =>
      runFormatsBench({
        calls: q ? QUICK_FORMATS_CALLS : FORMATS_CALLS,
        ...pairedWindows,
        build,
        log
      })
    )
  }
  if (has("tracing")) {
    results.tracing = await attempt("tracing (callgate exporting every span over OTLP, and with tracing off, side by side)", () =>
      runTracingBench({
        calls: q ? QUICK_TRACING_CALLS : TRACING_CALLS,
        ...pairedWindows,
        build,
        log
      })
    )
  }
  if (has("versus")) {
    results.versus = await attempt(`versus (${settings.ref ?? "the working tree"} and ${settings.against}, side by side)`, () =>
      runVersusBench({
        against: settings.against!,
        ref: settings.ref,
        swap: settings.swap,
        calls: q ? QUICK_VERSUS_CALLS : VERSUS_CALLS,
        ...pairedWindows,
        ...(settings.profile ? { profileDir: settings.out } : {}),
        log
      })
    )
  }
  if (has("redis")) {
    results.redis = await attempt("redis (one callgate on its own redis-server: commands and Redis CPU per call set-up and per call-second)", () =>
      runRedisCostBench({ ...(q ? QUICK_REDIS_SETUPS : REDIS_SETUPS), replica: true, steadySeconds: settings.stepSeconds, build, log })
    )
  }
  if (has("webhooks")) {
    results.webhooks = await attempt("webhooks", () =>
      runPart("webhooks", q ? { backlog: 1000, rate: 100, seconds: 3 } : { backlog: 10_000, rate: 100, seconds: 10 }, 300_000)
    )
  }
  if (has("breaker")) {
    results.breaker = await attempt("breaker", () =>
      runPart("breaker", q ? { sessions: 100, durationMs: 12_000 } : { sessions: 500, durationMs: 20_000 }, 180_000)
    )
  }
  if (has("fallback")) {
    results.fallback = await attempt("fallback", () =>
      runPart("fallback", { ...(q ? { calls: 20, breakerCalls: 4 } : { calls: 100, breakerCalls: 20 }), build }, 180_000)
    )
  }
  if (has("shedding")) {
    results.shedding = await attempt("shedding (entry answer of a shed call; silence before the fallback, shedding on and off)", () =>
      runPart("shedding", { ...(q ? { calls: 50, offCalls: 5 } : { calls: 200, offCalls: 20 }), build }, 180_000)
    )
  }

  if (has("failover")) {
    results.failover = await attempt("failover", () =>
      // Same instance, then across two instances on one redis-server (bench/failover.ts).
      runPart("failover", { ...(q ? { calls: 20, failovers: 10 } : { calls: 100, failovers: 50 }), build }, 420_000)
    )
  }

  results.durationSeconds = Math.round((Date.now() - startedAt.getTime()) / 1000)
  results.machine = machine(loadAtStart)
  const markdown = renderMarkdown(results)
  const json = JSON.stringify(results, null, 2) + "\n"
  const stamp = startedAt.toISOString().replace(/[:.]/g, "-")
  writeFileSync(join(settings.out, "latest.md"), markdown)
  writeFileSync(join(settings.out, "latest.json"), json)
  writeFileSync(join(settings.out, `run-${stamp}.md`), markdown)
  writeFileSync(join(settings.out, `run-${stamp}.json`), json)
  const chart = relayChartOf(
    results.baseline === undefined || isError(results.baseline) ? undefined : (results.baseline as SystemFigures),
    results.gateway === undefined || isError(results.gateway) ? undefined : (results.gateway as SystemFigures),
    `callgate and the bare relay, ${startedAt.toISOString().slice(0, 16).replace("T", " ")} UTC, ${results.settings.source}`
  )
  if (chart !== undefined) {
    writeFileSync(join(settings.out, "latest.svg"), chart)
    writeFileSync(join(settings.out, `run-${stamp}.svg`), chart)
  }
  process.stdout.write(`\n${markdown}\n`)
  log(`results: ${join(settings.out, "latest.md")} and latest.json (copies run-${stamp}.*)`)
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`bench: ${(error as Error).message}\n\n${USAGE}\n`)
    process.exit(2)
  }
)
