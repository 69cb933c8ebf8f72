/**
 * The systems under test run as they ship: compiled JavaScript on plain `node` (`npm start` runs
 * `node dist/src/main.js`), not through tsx, whose loader thread and transpiler caches would add
 * memory and CPU that production does not have. The benchmark compiles the project transpile-only
 * (`tsc --noCheck`: the same emitter as `npm run build`, no type check, so a work-in-progress type
 * error elsewhere does not stop a run) into node_modules/.cache, leaving dist/ alone.
 */
import { execFileSync, spawn } from "node:child_process"
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { basename, join } from "node:path"
import { repoRoot } from "./benchProcess.js"

/**
 * One build folder per checkout: worktrees share node_modules (a symlink to the main checkout's), and
 * two benchmarks building at once into one folder would delete each other's build mid-run.
 */
export const BUILD_DIR = join(repoRoot, "node_modules/.cache", `callgate-bench-${basename(repoRoot)}`)

export interface BenchBuild {
  /** The compiled tree, mirroring the repository (src/, bench/, ...). */
  readonly dir: string
  /** What was built: a commit, or the working tree on top of one. */
  readonly source: string
}

const git = (args: ReadonlyArray<string>) => execFileSync("git", args, { cwd: repoRoot, encoding: "utf8" }).trim()

/** What the working tree holds, for the results: the commit and whether it has uncommitted changes. */
const describeWorkingTree = () => {
  try {
    const changed = git(["status", "--porcelain", "--", "src", "config", "bench", "examples", "sim", "packages"]).split("\n").filter((line) => line !== "").length
    return `working tree at ${git(["rev-parse", "--short", "HEAD"])}${changed > 0 ? ` with ${changed} uncommitted file(s) in src/config/bench/examples/sim/packages` : ""}`
  } catch {
    return "working tree (not a git checkout)"
  }
}

/**
 * Compiles the working tree, or commit `ref`, into `root` (default BUILD_DIR; the versus part
 * builds its second commit beside it).
 */
export const buildForBench = async (ref?: string, root: string = BUILD_DIR): Promise<BenchBuild> => {
  const outDir = join(root, "dist")
  rmSync(root, { recursive: true, force: true })
  mkdirSync(root, { recursive: true })
  let project = "tsconfig.json"
  let source = describeWorkingTree()
  if (ref !== undefined) {
    const commit = git(["rev-parse", "--verify", `${ref}^{commit}`])
    const tree = join(root, "tree")
    mkdirSync(tree)
    // What tsc compiles, of what that commit has (sim/ and packages/ came later than some commits
    // a run is compared against; `git archive` refuses a path the commit lacks).
    const present = new Set(git(["ls-tree", "--name-only", commit]).split("\n"))
    const parts = ["tsconfig.json", "src", "config", "bench", "examples", "sim", "packages"].filter((part) => present.has(part))
    const archive = execFileSync("git", ["archive", "--format=tar", commit, ...parts], {
      cwd: repoRoot,
      maxBuffer: 256 * 2 ** 20
    })
    execFileSync("tar", ["-x", "-C", tree], { input: archive })
    project = join(tree, "tsconfig.json")
    if (parts.includes("packages")) {
      // The tree sits under node_modules, where tsc emits nothing it only reaches by import: the
      // packages the sources import (packages/webhooks) are named as inputs of their own.
      const included = (JSON.parse(readFileSync(project, "utf8")) as { include?: Array<string> }).include ?? []
      project = join(tree, "tsconfig.bench.json")
      writeFileSync(project, `${JSON.stringify({ extends: "./tsconfig.json", include: [...included, "packages/*/src"] })}\n`)
    }
    source = `commit ${commit.slice(0, 12)} (${ref})`
  }
  // Under node_modules, Node stops looking for package.json: say here that the output is ESM.
  writeFileSync(join(root, "package.json"), `${JSON.stringify({ type: "module", private: true })}\n`)
  const tsc = join(repoRoot, "node_modules/typescript/bin/tsc")
  const output = await new Promise<{ code: number | null; text: string }>((resolve) => {
    const child = spawn(process.execPath, [tsc, "-p", project, "--noCheck", "--declaration", "false", "--outDir", outDir], {
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let text = ""
    child.stdout.on("data", (chunk) => (text += chunk))
    child.stderr.on("data", (chunk) => (text += chunk))
    child.once("exit", (code) => resolve({ code, text }))
  })
  for (const file of ["src/main.js", "bench/baselineRelay.js"]) {
    if (!existsSync(join(outDir, file))) throw new Error(`the bench build did not produce ${file}:\n${output.text.slice(-4000)}`)
  }
  // tsc emits despite syntax errors elsewhere; say so, the run goes on with what compiled.
  if (output.code !== 0) process.stderr.write(`bench build: tsc reported problems (the run goes on):\n${output.text.slice(-2000)}\n`)
  return { dir: outDir, source }
}
