/**
 * `npm run test:busy [-- vitest args]`: the suite on a busy machine (README, "Checking the suite on a
 * busy machine").
 * Starts two CPU hogs (`node -e "for(;;);"`, one per core of a 2-core machine), runs the suite
 * (`npx vitest run`, plus any arguments given) three times in a row while they spin, prints each
 * run's `tests: N passed, N failed, N skipped` line (from vitest's JSON report, as .ci/run does),
 * and stops the hogs at the end, on Ctrl-C and on SIGTERM too. Exits non-zero when any run failed.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

const RUNS = 3
const HOGS = 2
/** `for(;;);`, which also ends itself once this script is gone (killed without a chance to stop it). */
const HOG = "const parent = process.ppid; for (let i = 1; ; i++) if (i % 50_000_000 === 0) { try { process.kill(parent, 0) } catch { process.exit() } }"
const vitestArgs = process.argv.slice(2)

const hogs: Array<ChildProcess> = []
const stopHogs = () => {
  for (const hog of hogs.splice(0)) {
    if (hog.exitCode === null && hog.signalCode === null) hog.kill("SIGKILL")
  }
}
let current: ChildProcess | undefined
const reports = mkdtempSync(join(tmpdir(), "callgate-test-busy-"))
const stopAll = (signal: NodeJS.Signals) => {
  stopHogs()
  current?.kill(signal)
  rmSync(reports, { recursive: true, force: true })
  process.exit(130)
}
process.on("SIGINT", () => stopAll("SIGINT"))
process.on("SIGTERM", () => stopAll("SIGTERM"))
process.on("exit", stopHogs)

interface RunSummary {
  readonly passed: number
  readonly failed: number
  readonly skipped: number
  readonly ok: boolean
}

/** One `npx vitest run`, its output shown as it comes, its totals read from the JSON report. */
const runSuite = (reportFile: string): Promise<RunSummary> =>
  new Promise((resolve) => {
    const child = spawn("npx", ["vitest", "run", "--reporter=default", "--reporter=json", `--outputFile.json=${reportFile}`, ...vitestArgs], {
      stdio: "inherit"
    })
    current = child
    child.on("exit", (code) => {
      current = undefined
      try {
        const report = JSON.parse(readFileSync(reportFile, "utf8"))
        const skipped = (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0)
        resolve({ passed: report.numPassedTests, failed: report.numFailedTests, skipped, ok: code === 0 && report.numFailedTests === 0 })
      } catch {
        // No report: vitest did not get as far as running tests.
        resolve({ passed: 0, failed: 1, skipped: 0, ok: false })
      }
    })
  })

const main = async () => {
  for (let i = 0; i < HOGS; i++) hogs.push(spawn(process.execPath, ["-e", HOG], { stdio: "ignore" }))
  console.log(`test:busy: ${HOGS} CPU hogs started (pids ${hogs.map((hog) => hog.pid).join(", ")}); the suite runs ${RUNS} times`)
  const lines: Array<string> = []
  let allOk = true
  try {
    for (let run = 1; run <= RUNS; run++) {
      const summary = await runSuite(join(reports, `run-${run}.json`))
      const line = `run ${run}/${RUNS}: tests: ${summary.passed} passed, ${summary.failed} failed, ${summary.skipped} skipped`
      lines.push(line)
      console.log(`test:busy: ${line}`)
      allOk &&= summary.ok
    }
  } finally {
    stopHogs()
    rmSync(reports, { recursive: true, force: true })
  }
  console.log(`test:busy: ${allOk ? "every run passed" : "a run failed"}, with ${HOGS} CPU hogs`)
  for (const line of lines) console.log(line)
  process.exit(allOk ? 0 : 1)
}

void main()
