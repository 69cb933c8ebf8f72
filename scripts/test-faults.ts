/**
 * `npm run test:faults [-- --long]`: the fault-injection suite (test/faults, docs/reliability.md).
 * Without flags it runs what CI runs (a 15 s Redis outage); `--long` adds the 2 and 10 minute
 * outages and holds the SIGTERM case's outage for 2 minutes (about 17 minutes in all).
 */
import { spawnSync } from "node:child_process"

const args = process.argv.slice(2)
const long = args.includes("--long")
const rest = args.filter((arg) => arg !== "--long")
const result = spawnSync("npx", ["vitest", "run", "test/faults", ...rest], {
  stdio: "inherit",
  env: { ...process.env, ...(long ? { CALLGATE_FAULTS_LONG: "1" } : {}) }
})
process.exit(result.status ?? 1)
