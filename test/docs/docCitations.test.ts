import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { join, relative } from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const repo = fileURLToPath(new URL("../..", import.meta.url))

const sources = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return sources(path)
    return /\.(ts|tsx|mts)$/.test(name) ? [path] : []
  })

/** `docs/x.md, "Section"` (also `docs/x.md "Section"`, `[x.md](x.md), "Section"` is not code). */
const CITATION = /docs\/([\w.-]+\.md)(?:,|:)?\s*(?:\n\s*(?:\*|\/\/)\s*)?"([^"\n]+)"/g

/** The headings of a Markdown page, without their `#`s. */
const headingsOf = (page: string): Set<string> =>
  new Set(
    readFileSync(join(repo, "docs", page), "utf8")
      .split("\n")
      .filter((line) => /^#{1,6}\s/.test(line))
      .map((line) => line.replace(/^#{1,6}\s+/, "").replace(/\s+#*\s*$/, "").trim())
  )

/** A citation names a heading whole, or the start of it up to its colon or parenthesis ("Instance loss" for "Instance loss: ..."). */
const names = (heading: string, section: string) => heading === section || heading.startsWith(`${section}:`) || heading.startsWith(`${section} (`)

describe("doc citations in code", () => {
  it("every docs/<page>.md, \"<section>\" a source comment cites names a page and a heading that exist", () => {
    const broken: Array<string> = []
    let cited = 0
    for (const file of ["src", "sim"].flatMap((dir) => sources(join(repo, dir)))) {
      for (const match of readFileSync(file, "utf8").matchAll(CITATION)) {
        const [, page, section] = match as unknown as [string, string, string]
        cited++
        const where = `${relative(repo, file)}: docs/${page}, "${section}"`
        if (!existsSync(join(repo, "docs", page))) broken.push(`${where}: no such page`)
        else if (![...headingsOf(page)].some((heading) => names(heading, section))) broken.push(`${where}: no such heading`)
      }
    }
    expect(cited).toBeGreaterThan(20)
    expect(broken).toEqual([])
  })
})
