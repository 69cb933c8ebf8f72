import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"
import { checkLayers } from "../../scripts/check-layers.js"

const repo = fileURLToPath(new URL("../..", import.meta.url))

/** A throwaway src/ tree: path -> source. */
const tree = (files: Record<string, string>) => {
  const root = mkdtempSync(join(tmpdir(), "layers-"))
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true })
    writeFileSync(join(root, path), text)
  }
  return root
}

describe("check:layers", () => {
  it("passes on callgate's own src/", () => {
    expect(checkLayers(join(repo, "src"))).toEqual([])
  })

  it("fails on a folder loop, naming the upward import", () => {
    const src = tree({
      "livecall/A.ts": `import { B } from "../agent/B.js"\nexport const A = B`,
      "agent/B.ts": `import type { A } from "../livecall/A.js"\nexport const B = 1`
    })
    expect(checkLayers(src).map((p) => p.message)).toEqual([expect.stringContaining("agent/ imports livecall/")])
  })

  it("fails on an import between two folders of one layer, and on an unknown folder", () => {
    const src = tree({ "turns/T.ts": `export { F } from "../fallback/F.js"`, "fallback/F.ts": "export const F = 1", "misc/M.ts": "export {}" })
    const messages = checkLayers(src).map((p) => `${p.file}: ${p.message}`)
    expect(messages).toContainEqual(expect.stringContaining("src/turns/T.ts: turns/ imports fallback/"))
    expect(messages).toContainEqual(expect.stringContaining("src/misc/M.ts: folder misc/ has no layer"))
  })

  it("fails on fastify outside src/http/, ws outside websocket/Ws*.ts and ioredis outside redis/Redis*.ts", () => {
    const src = tree({
      "livecall/S.ts": `import Fastify from "fastify"\nimport websocket from "@fastify/websocket"`,
      "agent/Dial.ts": `import { WebSocket } from "ws"`,
      "redis/Keys.ts": `import { Redis } from "ioredis"`,
      "agent/WsElsewhere.ts": `import { WebSocket } from "ws"`,
      "livecall/RedisElsewhere.ts": `import { Redis } from "ioredis"`,
      "websocket/WsOk.ts": `import { WebSocket } from "ws"`,
      "redis/RedisOk.ts": `import { Redis } from "ioredis"`,
      "http/Ok.ts": `import Fastify from "fastify"`
    })
    expect(checkLayers(src).map((p) => `${p.file}: ${p.message}`).sort()).toEqual([
      "src/agent/Dial.ts: imports ws outside a websocket/Ws*.ts adapter",
      "src/agent/WsElsewhere.ts: imports ws outside a websocket/Ws*.ts adapter",
      "src/livecall/RedisElsewhere.ts: imports ioredis outside a redis/Redis*.ts adapter",
      "src/livecall/S.ts: imports @fastify/websocket outside src/http/",
      "src/livecall/S.ts: imports fastify outside src/http/",
      "src/redis/Keys.ts: imports ioredis outside a redis/Redis*.ts adapter"
    ])
  })
})

describe("one wiring", () => {
  const read = (path: string) => readFileSync(join(repo, path), "utf8")

  it("src/main.ts launches appLayer from src/layers.ts and assembles nothing itself", () => {
    const main = read("src/main.ts")
    expect(main).toContain("Layer.launch(appLayer)")
    const localImports = [...main.matchAll(/from "(\.[^"]+)"/g)].map((m) => m[1])
    expect(localImports.sort()).toEqual(["./config/AppConfig.js", "./layers.js"])
  })

  it("the end-to-end harnesses start from the production graph of src/layers.ts", () => {
    // Each harness builds callgate from layers.ts and provides only configuration.
    for (const harness of ["test/support/testApp.ts", "test/livecall/callHarness.ts", "test/webhooks/webhookRuntime.ts", "test/webhooks/fixtures/deliveryProcess.ts"]) {
      const text = read(harness)
      expect(text, harness).toMatch(/from "(\.\.\/)+src\/layers\.js"/)
      // No harness assembles services of its own: no `.Default` layers, no `*Live` layer outside layers.ts's.
      expect(text, harness).not.toMatch(/\b[A-Z]\w+\.Default\b/)
    }
  })
})
