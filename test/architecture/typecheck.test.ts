import { readdirSync, readFileSync, statSync } from "node:fs"
import { join, relative, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const repo = fileURLToPath(new URL("../..", import.meta.url))

/** The projects `npm run typecheck` checks, as `.ci/run` runs it before the tests. */
const PROJECTS = ["tsconfig.test.json", "dashboard/tsconfig.json"]

const sources = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((name) => {
    if (name === "node_modules" || name === "dist" || name.startsWith(".")) return []
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return sources(path)
    return /\.(ts|tsx|mts|cts)$/.test(name) && !/\.d\.(ts|mts|cts)$/.test(name) ? [path] : []
  })

const rootFilesOf = (project: string): Array<string> => {
  const parsed = ts.getParsedCommandLineOfConfigFile(resolve(repo, project), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d) => { throw new Error(String(d.messageText)) } })
  if (parsed === undefined) throw new Error(`cannot read ${project}`)
  return parsed.fileNames.map((file) => resolve(file))
}

describe("CI type-checks everything", () => {
  it("every TypeScript file of the repository is in a project npm run typecheck checks", () => {
    const checked = new Set(PROJECTS.flatMap(rootFilesOf))
    const unchecked = sources(repo).filter((file) => !checked.has(resolve(file))).map((file) => relative(repo, file))
    expect(unchecked).toEqual([])
  })

  it(".ci/run runs npm run typecheck before the tests, and fails when it fails", () => {
    const run = readFileSync(join(repo, ".ci/run"), "utf8")
    const typecheck = run.indexOf("npm run --silent typecheck ||")
    expect(typecheck).toBeGreaterThan(0)
    expect(typecheck).toBeLessThan(run.indexOf("npm test"))
    const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { scripts: Record<string, string> }
    for (const project of PROJECTS) expect(pkg.scripts.typecheck).toContain(`tsc -p ${project}`)
  })
})
