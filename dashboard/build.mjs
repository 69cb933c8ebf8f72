#!/usr/bin/env node
// Builds the dashboard (dashboard/src) into dist/dashboard: one JS bundle and one CSS file, each
// named by its content hash, and an index.html that loads them (no inline script or style, so the
// strict Content-Security-Policy holds). `npm run build` runs it; the dashboard test calls
// buildDashboard() itself, so `npm test` works from a clean clone.
import { createHash, randomBytes } from "node:crypto"
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { basename, dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { build } from "esbuild"

const here = dirname(fileURLToPath(import.meta.url))
export const DEFAULT_OUT_DIR = join(here, "..", "dist", "dashboard")

/**
 * Builds into a fresh directory beside `outDir`, then swaps it in, so a server starting meanwhile
 * never sees half a build. Returns the asset names and their sizes.
 */
export async function buildDashboard({ outDir = DEFAULT_OUT_DIR, minify = true } = {}) {
  const staging = `${outDir}.staging-${process.pid}-${randomBytes(4).toString("hex")}`
  const assets = join(staging, "assets")
  mkdirSync(assets, { recursive: true })
  try {
    const result = await build({
      entryPoints: { app: join(here, "src", "main.ts") },
      bundle: true,
      format: "esm",
      target: ["es2022", "chrome110", "firefox110", "safari16"],
      platform: "browser",
      minify,
      sourcemap: false,
      legalComments: "none",
      entryNames: "[name]-[hash]",
      assetNames: "[name]-[hash]",
      outdir: assets,
      metafile: true,
      logLevel: "silent",
      define: { "process.env.NODE_ENV": '"production"' }
    })
    const outputs = Object.keys(result.metafile.outputs).map((file) => basename(file))
    const script = outputs.find((name) => /^app-[A-Z0-9]+\.js$/i.test(name))
    const style = outputs.find((name) => /^app-[A-Z0-9]+\.css$/i.test(name))
    if (script === undefined || style === undefined) throw new Error(`dashboard build: unexpected outputs ${outputs.join(", ")}`)
    const icon = readFileSync(join(here, "favicon.svg"))
    const iconName = `favicon-${createHash("sha256").update(icon).digest("hex").slice(0, 10)}.svg`
    writeFileSync(join(assets, iconName), icon)
    const html = readFileSync(join(here, "index.html"), "utf8")
      .replace("%ICON%", `/dashboard/assets/${iconName}`)
      .replace("%SCRIPT%", `/dashboard/assets/${script}`)
      .replace("%STYLE%", `/dashboard/assets/${style}`)
    writeFileSync(join(staging, "index.html"), html)
    const old = `${outDir}.old-${process.pid}-${randomBytes(4).toString("hex")}`
    mkdirSync(dirname(outDir), { recursive: true })
    try {
      renameSync(outDir, old)
    } catch {
      // no previous build
    }
    renameSync(staging, outDir)
    rmSync(old, { recursive: true, force: true })
    return { outDir, script, style }
  } catch (error) {
    rmSync(staging, { recursive: true, force: true })
    throw error
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  buildDashboard().then(
    ({ outDir, script, style }) => process.stdout.write(`dashboard: ${outDir} (${script}, ${style})\n`),
    (error) => {
      process.stderr.write(`dashboard build failed: ${error instanceof Error ? error.message : String(error)}\n`)
      process.exit(1)
    }
  )
}
