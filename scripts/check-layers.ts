/**
 * `npm run check:layers`: the architecture of docs/design.md, checked. Fails (exit 1, one line per
 * problem) when
 *  - a folder of src/ imports a folder of its own layer or of a layer above it (so no two folders
 *    can ever import each other, directly or through others), or a folder not in the table below;
 *  - fastify or @fastify/* is imported outside src/http/ (and src/main.ts);
 *  - ws is imported outside a `websocket/Ws*.ts` adapter, or ioredis outside a `redis/Redis*.ts` adapter.
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, normalize, relative, sep } from "node:path"
import { fileURLToPath } from "node:url"
import { checkWiring } from "./check-wiring.js"

/** Bottom to top. A folder may import only folders of a lower layer. */
export const LAYERS: ReadonlyArray<ReadonlyArray<string>> = [
  ["config", "audio"],
  ["observability", "secrets", "kernel", "egress"],
  ["environments"],
  ["frames", "twiml"],
  ["apikeys", "webhooks", "breaker", "recording"],
  ["turns", "fallback", "agent"],
  ["sessions"],
  ["livecall", "recovery"],
  ["fleet", "calls"],
  ["carriers"],
  ["telephony"],
  ["redis", "websocket"],
  ["http"],
  ["(root)"]
]

export interface Problem {
  readonly file: string
  readonly message: string
}

const rankOf = new Map<string, number>(LAYERS.flatMap((folders, rank) => folders.map((folder) => [folder, rank] as const)))

const IMPORT = /(?:^|[\s;])(?:import|export)\s[^"'`;]*?from\s*["']([^"']+)["']|(?:^|[\s;(])import\s*\(\s*["']([^"']+)["']\s*\)|^\s*import\s*["']([^"']+)["']/gm

const sourceFiles = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return sourceFiles(path)
    return /\.(ts|tsx|mts)$/.test(name) && !name.endsWith(".d.ts") ? [path] : []
  })

/** The folder of src/ a path is in ("(root)" for src/*.ts), or undefined outside src/. */
const folderOf = (srcDir: string, path: string): string | undefined => {
  const rel = relative(srcDir, path)
  if (rel.startsWith("..")) return undefined
  const parts = rel.split(sep)
  return parts.length === 1 ? "(root)" : parts[0]
}

const specifiersOf = (text: string): Array<string> => {
  const found: Array<string> = []
  for (const match of text.matchAll(IMPORT)) found.push((match[1] ?? match[2] ?? match[3])!)
  return found
}

const isPackage = (specifier: string, name: string) => specifier === name || specifier.startsWith(`${name}/`)

export const checkLayers = (srcDir: string): Array<Problem> => {
  const problems: Array<Problem> = []
  for (const file of sourceFiles(srcDir)) {
    const rel = relative(srcDir, file)
    const from = folderOf(srcDir, file)!
    const fromRank = rankOf.get(from)
    const name = file.split(sep).pop()!
    const say = (message: string) => problems.push({ file: `src/${rel.split(sep).join("/")}`, message })
    if (fromRank === undefined) say(`folder ${from}/ has no layer: add it to LAYERS in scripts/check-layers.ts and docs/design.md`)
    for (const specifier of specifiersOf(readFileSync(file, "utf8"))) {
      if (specifier.startsWith(".")) {
        const target = folderOf(srcDir, normalize(join(dirname(file), specifier)))
        if (target === undefined || target === from || fromRank === undefined) continue
        const targetRank = rankOf.get(target)
        if (targetRank === undefined) continue
        if (targetRank >= fromRank) {
          say(`${from}/ imports ${target}/ (${specifier}), which is ${targetRank === fromRank ? "in the same layer" : "in a layer above"}`)
        }
        continue
      }
      if ((isPackage(specifier, "fastify") || specifier.startsWith("@fastify/")) && from !== "http" && rel !== "main.ts") {
        say(`imports ${specifier} outside src/http/`)
      }
      if (isPackage(specifier, "ws") && !(from === "websocket" && name.startsWith("Ws"))) say(`imports ws outside a websocket/Ws*.ts adapter`)
      if (isPackage(specifier, "ioredis") && !(from === "redis" && name.startsWith("Redis"))) say(`imports ioredis outside a redis/Redis*.ts adapter`)
    }
  }
  return problems
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === normalize(process.argv[1])) {
  const srcDir = fileURLToPath(new URL("../src", import.meta.url))
  const problems = [...checkLayers(srcDir), ...checkWiring(fileURLToPath(new URL("..", import.meta.url)))]
  for (const problem of problems) console.error(`${problem.file}: ${problem.message}`)
  if (problems.length > 0) {
    console.error(`check:layers: ${problems.length} problem${problems.length === 1 ? "" : "s"}`)
    process.exit(1)
  }
  console.log(`check:layers: ${LAYERS.flat().length} folders in ${LAYERS.length} layers, no upward import, adapters in place, no service graph wired outside src/layers.ts`)
}
