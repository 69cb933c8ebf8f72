/**
 * The "one wiring" rule of docs/design.md, checked: outside `src/`, nothing assembles a service graph
 * by hand. A file in test/, bench/, examples/, scripts/ or sim/ may take layers from `src/layers.ts`
 * (the production graph and its per-feature parts) and put configuration, the clock or an external
 * endpoint under them; it may also build the one unit it tests over those (a store adapter in a
 * contract suite, one service over `FoundationLive`). It may not wire two services of `src/` to each
 * other itself: that is a second graph, which drifts from the one production runs.
 *
 * A file breaks the rule when it names two or more service layers of `src/`: `X.Default` of a
 * service (AppConfig, which is configuration, aside), or a `*Live` layer imported from a module of
 * `src/` other than `src/layers.ts` (store adapters, `Redis*Live` and `Memory*Live`, aside: they are
 * the units their contract suites test).
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join, relative, sep } from "node:path"

export interface WiringProblem {
  readonly file: string
  readonly message: string
}

export const CHECKED_FOLDERS = ["test", "bench", "examples", "scripts", "sim"] as const

const sourceFiles = (dir: string): Array<string> => {
  let names: Array<string>
  try {
    names = readdirSync(dir)
  } catch {
    return []
  }
  return names.flatMap((name) => {
    if (name === "node_modules" || name === "dist") return []
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return sourceFiles(path)
    return /\.(ts|mts)$/.test(name) && !name.endsWith(".d.ts") ? [path] : []
  })
}

const DEFAULT_LAYER = /\b([A-Z]\w*)\.Default\b/g
const IMPORT = /import\s*(?:type\s*)?\{([^}]*)\}\s*from\s*["']([^"']+)["']/g
const isStoreAdapter = (name: string) => /^(Redis|Memory)\w*Live$/.test(name)

/** The service layers of src/ a file's text names, wired by hand (see the rule above). */
export const serviceLayersOf = (text: string): Array<string> => {
  const found = new Set<string>()
  for (const match of text.matchAll(DEFAULT_LAYER)) if (match[1] !== "AppConfig") found.add(`${match[1]}.Default`)
  for (const match of text.matchAll(IMPORT)) {
    const from = match[2]!
    if (!/(^|\/)src\//.test(from) || /(^|\/)src\/layers\.js$/.test(from)) continue
    for (const part of match[1]!.split(",")) {
      const name = part.trim().replace(/^type\s+/, "").split(/\s+as\s+/)[0]!.trim()
      if (name.endsWith("Live") && !isStoreAdapter(name)) found.add(name)
    }
  }
  return [...found].sort()
}

export const checkWiring = (repoDir: string): Array<WiringProblem> =>
  CHECKED_FOLDERS.flatMap((folder) => sourceFiles(join(repoDir, folder))).flatMap((file) => {
    const layers = serviceLayersOf(readFileSync(file, "utf8"))
    if (layers.length < 2) return []
    return [
      {
        file: relative(repoDir, file).split(sep).join("/"),
        message: `assembles a service graph by hand (${layers.join(", ")}): build from src/layers.ts (docs/design.md, "One wiring")`
      }
    ]
  })
