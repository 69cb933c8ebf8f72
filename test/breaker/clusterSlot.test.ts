import { createRequire } from "node:module"
import { describe, expect, it } from "vitest"
import { envTag, keys } from "../../src/store/keys.js"

/** Redis Cluster's key-to-slot function (CRC16 of the hash tag, mod 16384), as ioredis computes it. */
const clusterSlot: (key: string) => number = createRequire(import.meta.url)("cluster-key-slot")

describe("Redis Cluster slots", () => {
  it("uses Redis's slot function (CRC16-XMODEM of the hash tag, mod 16384)", () => {
    expect(clusterSlot("123456789")).toBe(0x31c3 % 16384)
    expect(clusterSlot("{user1000}.following")).toBe(clusterSlot("user1000"))
  })

  it("every key of one environment maps to one cluster slot", () => {
    const agentId = "agent_7"
    const environmentId = "env_production"
    const environmentKeys = [keys.environment(agentId, environmentId), keys.breakerOccurrences(agentId, environmentId)]
    // Any other key builder taking (agentId, environmentId) that is about the environment is included too.
    for (const build of Object.values(keys)) {
      if (typeof build !== "function" || build.length !== 2) continue
      const key = (build as (a: string, e: string) => string)(agentId, environmentId)
      if (key.includes(envTag(agentId, environmentId)) && !environmentKeys.includes(key)) environmentKeys.push(key)
    }
    const slot = clusterSlot(envTag(agentId, environmentId).slice(1, -1))
    expect(environmentKeys.length).toBeGreaterThanOrEqual(2)
    for (const key of environmentKeys) {
      expect(key.startsWith("callgate:")).toBe(true)
      expect(clusterSlot(key), key).toBe(slot)
    }
  })
})
