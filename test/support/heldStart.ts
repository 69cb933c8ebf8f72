/**
 * Loaded with `--import` before src/main.ts by spawnHeldGateway (gatewayProcess.ts): loads every
 * module main.ts reaches, says so on stderr, then waits for a line (or the end) on stdin before
 * main.ts runs. Nothing of the app starts here: no config is read, no store is opened.
 */
await import("../../src/layers.js")
await import("../../src/config/AppConfig.js")
await import("@effect/platform-node/NodeRuntime")
process.stderr.write("callgate-test: modules loaded, waiting for release\n")
await new Promise<void>((resolve) => {
  process.stdin.once("data", () => resolve())
  process.stdin.once("end", () => resolve())
})
process.stdin.destroy()

export {}
