#!/usr/bin/env node
/**
 * `npm start`: runs the built gateway (dist/), building it first only when a source changed since
 * the last build (docs/api.md, "Running"). A configuration error is reported before any build.
 *
 *   up to date  -> imports dist/src/main.js in this process at once (it checks the configuration)
 *   stale       -> checks the configuration (scripts/check-config.ts, about a second), then
 *                  `tsc --incremental`, writes the stamp, and starts
 *
 * Stale means: no dist/src/main.js, no stamp, or a file under src/, config/, examples/, bench/,
 * dashboard/ (or tsconfig.json, package.json, package-lock.json) newer than the stamp.
 */
import { spawnSync } from "node:child_process"
import { existsSync, readdirSync, statSync, utimesSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const stamp = join(root, "dist", ".build-stamp")
const main = join(root, "dist", "src", "main.js")

const newestMtime = (path) => {
  if (!existsSync(path)) return 0
  const stats = statSync(path)
  if (!stats.isDirectory()) return stats.mtimeMs
  let newest = 0
  for (const entry of readdirSync(path)) {
    // Only what tsc reads: bench results, audio fixtures and the like do not make a build stale.
    if (/\.(ts|mts|mjs|json|html|css|svg)$/.test(entry) || !entry.includes(".")) newest = Math.max(newest, newestMtime(join(path, entry)))
  }
  return newest
}

const sources = ["src", "config", "examples", "bench", "dashboard", "tsconfig.json", "package.json", "package-lock.json"]
const stale = () => {
  if (!existsSync(main) || !existsSync(stamp)) return "no build yet"
  const built = statSync(stamp).mtimeMs
  const changed = sources.find((source) => newestMtime(join(root, source)) > built)
  return changed === undefined ? undefined : `${changed} changed since the last build`
}

const run = (args) => spawnSync(process.execPath, args, { cwd: root, stdio: "inherit" }).status

const why = stale()
if (why !== undefined) {
  if (run(["--import", "tsx", "scripts/check-config.ts"]) !== 0) process.exit(1)
  process.stderr.write(`callgate: building (${why})...\n`)
  const startedAt = Date.now()
  // `npm run build`: tsc --incremental, the dashboard bundle, the stamp.
  if (spawnSync("npm", ["run", "--silent", "build"], { cwd: root, stdio: ["ignore", 2, 2] }).status !== 0) {
    process.stderr.write("callgate: the build failed\n")
    process.exit(1)
  }
  // Stamped with the build's start: a file saved during the build makes the next start build again.
  writeFileSync(stamp, `${new Date(startedAt).toISOString()}\n`)
  utimesSync(stamp, startedAt / 1000, startedAt / 1000)
  process.stderr.write(`callgate: built in ${((Date.now() - startedAt) / 1000).toFixed(1)} s\n`)
}
await import(pathToFileURL(main).href)
