import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"
import { checkWiring, serviceLayersOf } from "../../scripts/check-wiring.js"

const repo = fileURLToPath(new URL("../..", import.meta.url))

/** A throwaway repository: path -> source. */
const tree = (files: Record<string, string>) => {
  const root = mkdtempSync(join(tmpdir(), "wiring-"))
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true })
    writeFileSync(join(root, path), text)
  }
  return root
}

// The fixtures are spelled in pieces so that this file does not itself read as wiring to the check.
const use = (name: string) => `${name}.${"Default"}`
const imp = (names: string, from: string) => `${"im"}port { ${names} } from "${from}"`

describe("one wiring outside src/", () => {
  it("no file of test/, bench/, examples/, scripts/ or sim/ wires services of src/ by hand", () => {
    expect(checkWiring(repo)).toEqual([])
  })

  it("catches a graph wired from two services' Default layers, or from a *Live imported past src/layers.ts", () => {
    const root = tree({
      "test/a.test.ts": `const l = ${use("Breaker")}.pipe(Layer.provideMerge(${use("BreakerMetrics")}))`,
      "bench/b.ts": `${imp("CarriersLive", "../src/carriers/CarriersLive.js")}\nconst l = CarriersLive.pipe(Layer.provide(${use("TwilioCarrier")}))`,
      "test/ok.test.ts": `${imp("TurnsLive, FoundationLive", "../src/layers.js")}\nconst l = ${use("SocketGuards")}.pipe(Layer.provide(FoundationLive), Layer.provide(${use("AppConfig")}))`,
      "test/contract.test.ts": `${imp("RedisApiKeyStoreLive", "../src/redis/RedisApiKeyStore.js")}\n${imp("MemoryApiKeyStoreLive", "../src/apikeys/MemoryApiKeyStore.js")}`
    })
    expect(checkWiring(root).map((p) => p.file).sort()).toEqual(["bench/b.ts", "test/a.test.ts"])
  })

  it("counts configuration and store adapters out, and layers.ts's layers in no file", () => {
    expect(serviceLayersOf(`${use("AppConfig")}; ${imp("StoresLive, CallsLive", "../../src/layers.js")}`)).toEqual([])
    expect(serviceLayersOf(imp("RedisBreakerStoreLive, MemoryBreakerStoreLive", "../src/redis/RedisBreakerStore.js"))).toEqual([])
    expect(serviceLayersOf(`${imp("type X, DeliveryWorkerLive as Worker", "../src/webhooks/DeliveryWorker.js")}; ${use("Metrics")}`)).toEqual([
      "DeliveryWorkerLive",
      "Metrics.Default"
    ])
  })
})
