/**
 * `npm run test:chaos [-- --long]`: the partial-fault scenarios (test/chaos, docs/reliability.md,
 * "Partial faults"): pauses (SIGSTOP/SIGCONT) with live calls, a Redis that refuses, drops packets
 * or answers 300 ms late, carrier REST answering 500 or hanging, failed authentications from one
 * address, agents reconnecting right after a restart. Without flags it runs what CI runs (the same
 * files run in the normal suite); `--long` adds the 20 s and 30 s pauses and the longer outages.
 */
import { spawnSync } from "node:child_process"

const args = process.argv.slice(2)
const long = args.includes("--long")
const rest = args.filter((arg) => arg !== "--long")
const result = spawnSync("npx", ["vitest", "run", "test/chaos", ...rest], {
  stdio: "inherit",
  env: { ...process.env, ...(long ? { CALLGATE_FAULTS_LONG: "1" } : {}) }
})
process.exit(result.status ?? 1)
