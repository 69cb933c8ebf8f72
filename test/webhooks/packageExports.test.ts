import { existsSync, readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"
import * as webhooks from "../../src/webhooks/index.js"

const root = fileURLToPath(new URL("../../", import.meta.url))
const json = (path: string) => JSON.parse(readFileSync(`${root}${path}`, "utf8"))

describe("the callgate/webhooks package entry", () => {
  it("maps ./webhooks to the build of src/webhooks/index.ts, with its declarations", () => {
    const pkg = json("package.json")
    expect(pkg.exports["./webhooks"]).toEqual({
      types: "./dist/src/webhooks/index.d.ts",
      default: "./dist/src/webhooks/index.js"
    })
    expect(pkg.exports["."]).toBeDefined()
    // `npm run build` (tsc -p tsconfig.json) compiles src/ into dist/ with declarations, keeping the path.
    const tsconfig = json("tsconfig.json")
    expect(tsconfig.compilerOptions).toMatchObject({ rootDir: ".", outDir: "dist", declaration: true })
    expect(tsconfig.include).toContain("src")
    expect(pkg.scripts.build).toMatch(/^tsc -p tsconfig\.json\b/)
    expect(existsSync(`${root}src/webhooks/index.ts`)).toBe(true)
  })

  it("exports the receiver's verifier and signer, and nothing that needs the service", () => {
    expect(Object.keys(webhooks).sort()).toEqual(
      ["ATTEMPT_HEADER", "DEFAULT_TOLERANCE_SECONDS", "DELIVERY_ID_HEADER", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "signPayload", "verifySignature"].sort()
    )
    const source = readFileSync(`${root}packages/webhooks/src/index.ts`, "utf8")
    const imports = [...source.matchAll(/^import .* from "([^"]+)"/gm)].map((m) => m[1])
    expect(imports).toEqual(["node:crypto"])
  })
})
