import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import semver from "semver"
import { describe, expect, it } from "vitest"
import { repoRoot } from "../support/gatewayProcess.js"

/** Every installed package, with the Node range its `engines` asks for. */
const installed = (dir: string, found: Array<{ name: string; version: string; node: string }> = []) => {
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry)
    if (entry.startsWith("@")) {
      installed(path, found)
      continue
    }
    const manifest = join(path, "package.json")
    if (existsSync(manifest)) {
      const pkg = JSON.parse(readFileSync(manifest, "utf8"))
      if (typeof pkg.engines?.node === "string") found.push({ name: pkg.name, version: pkg.version, node: pkg.engines.node })
    }
    if (existsSync(join(path, "node_modules"))) installed(join(path, "node_modules"), found)
  }
  return found
}

describe("the installed dependencies", () => {
  it("all accept the oldest Node package.json's engines allows (no EBADENGINE warning on Node 20)", () => {
    const oldest = semver.minVersion(JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")).engines.node)!.version
    expect(oldest).toBe("20.0.0")
    // The latest 20.x release line is what the machines run; `engines` ranges name minors (>=20.19).
    const node20 = "20.19.0"
    const refusing = installed(join(repoRoot, "node_modules")).filter((pkg) => !semver.satisfies(node20, pkg.node))
    expect(refusing.map((pkg) => `${pkg.name}@${pkg.version} wants node ${pkg.node}`)).toEqual([])
  })
})
