import { describe, expect, inject, it } from "vitest"
import { TEST_SECRETS_KEY } from "../support/testApp.js"
import { spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"

const ADMIN = "startup-test-admin-key-0123"

/** Runs the gateway with `env`, expecting it to refuse to start; returns stderr and the exit. */
const refusedStart = async (env: Record<string, string>) => {
  const gateway = await spawnGateway(env)
  const timer = setTimeout(() => gateway.child.kill("SIGKILL"), 30_000)
  const exit = await gateway.exited
  clearTimeout(timer)
  return { exit, stderr: gateway.stderr(), stdout: gateway.stdout() }
}

describe("start-up with bad configuration", () => {
  it.each([
    [{}, "ADMIN_API_KEY: is required but not set"],
    [{ ADMIN_API_KEY: ADMIN, PORT: "eighty", REDIS_URL: "redis://127.0.0.1:1" }, "PORT: "],
    [{ ADMIN_API_KEY: ADMIN, REDIS_URL: "redis://127.0.0.1:1" }, "SECRETS_KEY: is required when REDIS_URL is set"],
    [{ ADMIN_API_KEY: "short-Secr3t" }, "ADMIN_API_KEY: must be at least 16 characters"]
  ] as const)("%j: one line on stderr naming the variable, exit code 1", async (env, expected) => {
    const { exit, stderr } = await refusedStart(env)
    expect(exit).toEqual({ code: 1, signal: null })
    expect(stderr).toMatch(/^callgate: invalid configuration: [^\n]+\n$/)
    expect(stderr).toContain(expected)
    expect(stderr).not.toContain("Secr3t")
  })
})

describe("start-up and shutdown", () => {
  it("starts on the embedded store with valid config, says so in JSON logs, and exits 0 on SIGTERM", async () => {
    const gateway = await spawnGateway({ ADMIN_API_KEY: ADMIN })
    try {
      await waitForHealthy(gateway)
      expect((await fetch(`${gateway.baseUrl}/readyz`)).status).toBe(200)
      const list = await fetch(`${gateway.baseUrl}/v1/agents/agent_1/environments`, { headers: { authorization: `Bearer ${ADMIN}` } })
      expect(list.status).toBe(200)
      expect(await list.json()).toEqual({ data: [] })
    } finally {
      const exit = await gateway.stop("SIGTERM")
      expect(exit).toEqual({ code: 0, signal: null })
    }
    expect(gateway.stderr()).toBe("")
    const lines = gateway.stdout().trim().split("\n")
    const records = lines.map((line) => JSON.parse(line) as { level: string; msg: string })
    expect(records.map((r) => r.msg)).toEqual(expect.arrayContaining(["callgate listening"]))
    // The in-memory mode makes a random secrets key at start and says so.
    expect(records.some((r) => r.level === "warn" && r.msg.includes("SECRETS_KEY is not set"))).toBe(true)
    // ... and that nothing it holds survives a crash.
    expect(records.some((r) => r.level === "warn" && r.msg.includes("embedded in-memory store") && r.msg.includes("crash"))).toBe(true)
    expect(records.some((r) => r.msg.startsWith("callgate stopping"))).toBe(true)
    expect(gateway.stdout()).not.toContain(ADMIN)
    // Stopped means stopped: nothing listens any more.
    await expect(fetch(`${gateway.baseUrl}/healthz`)).rejects.toThrow()
  })

  it("starts on Redis, reports ready, and exits 0 on SIGTERM with its connections closed", async () => {
    const gateway = await spawnGateway({ ADMIN_API_KEY: ADMIN, REDIS_URL: inject("redisUrl"), SECRETS_KEY: TEST_SECRETS_KEY })
    try {
      await waitForHealthy(gateway, "/readyz")
    } finally {
      expect(await gateway.stop("SIGTERM")).toEqual({ code: 0, signal: null })
    }
    expect(gateway.stderr()).toBe("")
    expect(gateway.stdout()).not.toContain("SECRETS_KEY is not set")
    expect(gateway.stdout()).not.toContain(TEST_SECRETS_KEY)
  })

  it("exits 0 on SIGINT too", async () => {
    const gateway = await spawnGateway({ ADMIN_API_KEY: ADMIN })
    await waitForHealthy(gateway)
    expect(await gateway.stop("SIGINT")).toEqual({ code: 0, signal: null })
    expect(gateway.stderr()).toBe("")
  })
})
