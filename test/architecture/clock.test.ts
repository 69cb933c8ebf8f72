import { readdirSync, readFileSync, statSync } from "node:fs"
import { join, relative } from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const repo = fileURLToPath(new URL("../..", import.meta.url))
/** The one file of src/ that may read the wall clock or build a Date (docs/design.md, "One clock"). */
const TIME_FILE = "src/kernel/Time.ts"

const sources = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return sources(path)
    return /\.(ts|tsx|mts)$/.test(name) ? [path] : []
  })

/** The code of a file with its comments blanked (a comment may name what it does not call). */
const codeOf = (text: string) => text.replace(/\/\*[\s\S]*?\*\//g, (comment) => comment.replace(/[^\n]/g, " ")).replace(/\/\/[^\n]*/g, "")

describe("one clock", () => {
  it("no Date.now (called or passed as a default clock) or new Date( in src/ outside src/kernel/Time.ts: time comes from Effect's Clock", () => {
    const found: Array<string> = []
    for (const file of sources(join(repo, "src"))) {
      const rel = relative(repo, file).split("\\").join("/")
      if (rel === TIME_FILE) continue
      codeOf(readFileSync(file, "utf8"))
        .split("\n")
        .forEach((line, index) => {
          if (/\bDate\.now\b|\bnew Date\(/.test(line)) found.push(`${rel}:${index + 1}: ${line.trim()}`)
        })
    }
    expect(found).toEqual([])
  })
})
