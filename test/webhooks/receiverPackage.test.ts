import { execFileSync } from "node:child_process"
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { signPayload } from "../../src/webhooks/index.js"
import { repoRoot } from "../support/gatewayProcess.js"

const npm = (args: Array<string>, cwd: string) => execFileSync("npm", [...args, "--no-audit", "--no-fund", "--loglevel=error"], { cwd, encoding: "utf8" })

describe("@callgate/webhooks, installed in a receiver project as docs/webhooks.md says", () => {
  const dirs: Array<string> = []
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
  })

  it("packs (npm pack), installs from the tarball into a fresh project, and verifies callgate's signature there", () => {
    const packed = mkdtempSync(join(tmpdir(), "callgate-webhooks-pack-"))
    const receiver = mkdtempSync(join(tmpdir(), "callgate-receiver-"))
    dirs.push(packed, receiver)
    npm(["pack", "--pack-destination", packed], join(repoRoot, "packages/webhooks"))
    const tarball = readdirSync(packed).find((file) => file.endsWith(".tgz"))!
    expect(tarball).toBe("callgate-webhooks-0.1.0.tgz")
    // What the tarball holds: the build and the README, no sources of the service.
    const listing = execFileSync("tar", ["-tzf", join(packed, tarball)], { encoding: "utf8" }).split("\n").filter(Boolean).sort()
    expect(listing).toEqual(["package/README.md", "package/dist/index.d.ts", "package/dist/index.js", "package/package.json"])

    writeFileSync(join(receiver, "package.json"), JSON.stringify({ name: "receiver", version: "1.0.0", private: true, type: "module" }))
    npm(["install", "--offline", join(packed, tarball)], receiver)
    const secret = "whsec_receiver-package-test-secret"
    const body = JSON.stringify({ event: "session.ended", sessionId: "ses_1" })
    const timestamp = Math.floor(Date.now() / 1000)
    writeFileSync(
      join(receiver, "verify.mjs"),
      `import { verifySignature } from "@callgate/webhooks"
const [secret, signature, timestamp, body] = process.argv.slice(2)
const ok = verifySignature({ secret, signature, timestamp, rawBody: Buffer.from(body) })
const forged = verifySignature({ secret, signature, timestamp, rawBody: Buffer.from(body + " ") })
console.log(JSON.stringify({ ok, forged }))
`
    )
    const out = execFileSync(process.execPath, ["verify.mjs", secret, signPayload(secret, timestamp, Buffer.from(body)), String(timestamp), body], { cwd: receiver, encoding: "utf8" })
    expect(JSON.parse(out)).toEqual({ ok: true, forged: false })
  }, 120_000)
})
