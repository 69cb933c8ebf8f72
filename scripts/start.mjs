#!/usr/bin/env node
/**
 * `npm start`: runs the built gateway (dist/), building it first only when a source changed since
 * the last build (docs/api.md, "Running"). A configuration error is reported before any build.
 *
 *   up to date  -> imports dist/src/main.js in this process at once (it checks the configuration)
 *   stale       -> checks the configuration (scripts/check-config.ts, about a second), then
 *                  `tsc --incremental`, writes the stamp, and starts
 *
 * Stale means: no dist/src/main.js, no stamp, or the content of the sources (files under src/,
 * config/, examples/, bench/, dashboard/, sim/, packages/, and tsconfig.json, package.json,
 * package-lock.json) differs from the build's. Modification times are only the fast path: when no
 * source is newer than the stamp nothing is read; when one is, the sources are hashed (sha256 of
 * every path and content, about 50 ms) and compared with the hash the stamp recorded, so a file
 * rewritten with the same bytes (`npm install` rewrites package-lock.json every time) builds nothing.
 */
import { spawnSync } from "node:child_process"
import { createHash } from "node:crypto"
import { existsSync, readdirSync, readFileSync, statSync, utimesSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const stamp = join(root, "dist", ".build-stamp")
const main = join(root, "dist", "src", "main.js")

// Only what tsc and the dashboard build read: bench results, audio fixtures and the like do not make a build stale.
const isSource = (entry) => /\.(ts|mts|mjs|json|html|css|svg)$/.test(entry) || !entry.includes(".")
const skipped = new Set(["node_modules", "dist", "results"])

const newestMtime = (path) => {
  if (!existsSync(path)) return 0
  const stats = statSync(path)
  if (!stats.isDirectory()) return stats.mtimeMs
  let newest = 0
  for (const entry of readdirSync(path)) {
    if (isSource(entry) && !skipped.has(entry)) newest = Math.max(newest, newestMtime(join(path, entry)))
  }
  return newest
}

const sourceFiles = (path, into) => {
  if (!existsSync(path)) return into
  if (!statSync(path).isDirectory()) return (into.push(path), into)
  for (const entry of readdirSync(path).sort()) {
    if (isSource(entry) && !skipped.has(entry)) sourceFiles(join(path, entry), into)
  }
  return into
}

const sources = ["src", "sim", "packages", "config", "examples", "bench", "dashboard", "tsconfig.json", "package.json", "package-lock.json"]

/** sha256 over every source's path and bytes: what the build was made from. */
const sourceHash = () => {
  const hash = createHash("sha256")
  for (const source of sources) {
    for (const file of sourceFiles(join(root, source), [])) {
      hash.update(file.slice(root.length)).update("\0").update(readFileSync(file)).update("\0")
    }
  }
  return hash.digest("hex")
}

/** The stamp: `{"builtAt", "sources"}` from this script; `npm run build` alone writes a bare date (no hash). */
const recordedHash = () => {
  try {
    return JSON.parse(readFileSync(stamp, "utf8")).sources
  } catch {
    return undefined
  }
}

const stale = () => {
  if (!existsSync(main) || !existsSync(stamp)) return "no build yet"
  const built = statSync(stamp).mtimeMs
  const changed = sources.find((source) => newestMtime(join(root, source)) > built)
  if (changed === undefined) return undefined
  if (recordedHash() === sourceHash()) {
    // Same bytes, newer times: move the stamp forward so the next start takes the fast path again.
    const now = Date.now() / 1000
    utimesSync(stamp, now, now)
    return undefined
  }
  return `${changed} changed since the last build`
}

const run = (args) => spawnSync(process.execPath, args, { cwd: root, stdio: "inherit" }).status

const why = stale()
if (why !== undefined) {
  if (!process.argv.includes("--build-only") && run(["--import", "tsx", "scripts/check-config.ts"]) !== 0) process.exit(1)
  process.stderr.write(`callgate: building (${why})...\n`)
  const startedAt = Date.now()
  // Hashed before building: a file saved during the build makes the next start build again.
  const hash = sourceHash()
  // `npm run build`: tsc --incremental, the dashboard bundle, the stamp.
  if (spawnSync("npm", ["run", "--silent", "build"], { cwd: root, stdio: ["ignore", 2, 2] }).status !== 0) {
    process.stderr.write("callgate: the build failed\n")
    process.exit(1)
  }
  // Stamped with the build's start: a file saved during the build makes the next start build again.
  writeFileSync(stamp, `${JSON.stringify({ builtAt: new Date(startedAt).toISOString(), sources: hash })}\n`)
  utimesSync(stamp, startedAt / 1000, startedAt / 1000)
  process.stderr.write(`callgate: built in ${((Date.now() - startedAt) / 1000).toFixed(1)} s\n`)
}
// `--build-only`: bring dist/ up to date and stop (npm run fleet builds once for its instances).
if (process.argv.includes("--build-only")) process.exit(0)
await import(pathToFileURL(main).href)
