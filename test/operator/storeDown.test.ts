import { afterEach, describe, expect, it } from "vitest"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { type RedisServer, startRedisServer } from "../support/redisServer.js"
import { TEST_SECRETS_KEY } from "../support/testApp.js"

const ADMIN = "store-down-test-admin-key"
const PASSWORD = "pw-Secr3t-in-url"

const lines = (gateway: GatewayProcess) =>
  gateway
    .stdout()
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as { level: string; msg: string; cause?: string })

const waitForLine = async (gateway: GatewayProcess, test: (msg: string) => boolean) => {
  for (;;) {
    const found = lines(gateway).find((line) => test(line.msg))
    if (found) return found
    if (gateway.child.exitCode !== null) throw new Error(`gateway exited: ${gateway.stderr()}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

const waitForLines = async (gateway: GatewayProcess, test: (msg: string) => boolean, count: number) => {
  for (;;) {
    if (lines(gateway).filter((line) => test(line.msg)).length >= count) return
    if (gateway.child.exitCode !== null) throw new Error(`gateway exited: ${gateway.stderr()}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

const voiceWebhook = (gateway: GatewayProcess, environmentId: string) =>
  fetch(`${gateway.baseUrl}/telephony/twilio/voice?agentId=demo-agent&environmentId=${environmentId}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ CallSid: "CA1", AccountSid: "AC1", From: "+15550100001", To: "+15550100002", Direction: "inbound" }).toString()
  })

describe("the store going away and coming back", () => {
  let redis: RedisServer | undefined
  let gateway: GatewayProcess | undefined
  afterEach(async () => {
    await gateway?.stop()
    await redis?.stop()
    gateway = redis = undefined
  })

  it("one line when it becomes unreachable (address and why, no password, no stack), 503 from the voice webhook meanwhile, one line when it is back", async () => {
    redis = await startRedisServer()
    const port = redis.port
    gateway = await spawnGateway({
      ADMIN_API_KEY: ADMIN,
      REDIS_URL: `redis://:${PASSWORD}@127.0.0.1:${port}`,
      SECRETS_KEY: TEST_SECRETS_KEY,
      REDIS_KEY_PREFIX: `storedown${Date.now()}:`,
      // Debug lines show the retrying loops at work while they stay quiet at warn.
      LOG_LEVEL: "debug"
    })
    await waitForHealthy(gateway, "/readyz")
    const created = await fetch(`${gateway.baseUrl}/v1/agents/demo-agent/environments`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "local" })
    })
    const environmentId = ((await created.json()) as { data: { id: string } }).data.id
    expect((await voiceWebhook(gateway, environmentId)).status).toBe(200)

    await redis.stop()
    const down = await waitForLine(gateway, (msg) => msg.startsWith("store unreachable"))
    // Whether the first failed command sees the server's reset or the refused reconnect depends on timing.
    expect(down.level).toBe("warn")
    expect(down.msg).toMatch(new RegExp(`^store unreachable at redis://127\\.0\\.0\\.1:${port}: connection (refused|reset); retrying$`))

    const refused = await voiceWebhook(gateway, environmentId)
    expect(refused.status).toBe(503)
    expect((await fetch(`${gateway.baseUrl}/readyz`)).status).toBe(503)
    // The fleet registry's refresh and the lost-instance sweep (every 2 s) have each failed twice.
    await waitForLines(gateway, (msg) => msg === "could not refresh this instance in the fleet registry", 2)
    await waitForLines(gateway, (msg) => msg === "could not reconcile the fleet's lost instances; retrying", 2)

    redis = await startRedisServer(port)
    const back = await waitForLine(gateway, (msg) => msg.startsWith("store reachable again"))
    expect(back.msg).toMatch(/^store reachable again after \d+ s$/)
    // The restarted Redis is empty: the environment is gone, so the caller hears the refusal (200 TwiML).
    expect((await voiceWebhook(gateway, environmentId)).status).toBe(200)

    const all = lines(gateway)
    expect(all.filter((line) => line.msg.startsWith("store unreachable"))).toHaveLength(1)
    expect(all.filter((line) => line.msg.startsWith("store reachable again"))).toHaveLength(1)
    // One line each way: the retrying loops' lines are at debug level (a call refused meanwhile is an event of its own).
    const outage = all.slice(all.findIndex((line) => line.msg === down.msg), all.findIndex((line) => line.msg.startsWith("store reachable again")) + 1)
    const loud = outage.filter((line) => line.level !== "debug" && !line.msg.startsWith("call refused"))
    expect(loud.map((line) => line.msg)).toEqual([down.msg, back.msg])
    // Expected network failures are one line each: no stack traces anywhere, and never the password.
    expect(gateway.stdout()).not.toMatch(/\n\s+at /)
    expect(gateway.stdout()).not.toContain("\\n    at ")
    expect(gateway.stdout() + gateway.stderr()).not.toContain(PASSWORD)
  }, 120_000)

  it("a store unreachable from the start is one line, then quiet retries", async () => {
    redis = await startRedisServer()
    const port = redis.port
    // A free port nothing listens on: the mistyped REDIS_URL.
    await redis.stop()
    redis = undefined
    gateway = await spawnGateway({
      ADMIN_API_KEY: ADMIN,
      REDIS_URL: `redis://:${PASSWORD}@127.0.0.1:${port}`,
      SECRETS_KEY: TEST_SECRETS_KEY,
      LOG_LEVEL: "debug"
    })
    await waitForLine(gateway, (msg) => msg === "callgate listening")
    // The retrying loops have each come round more than once.
    await waitForLines(gateway, (msg) => msg === "could not refresh this instance in the fleet registry", 3)
    await waitForLines(gateway, (msg) => msg === "could not reconcile the fleet's lost instances; retrying", 2)
    const loud = lines(gateway).filter((line) => line.level === "warn" || line.level === "error")
    expect(loud.filter((line) => /store|fleet|reconcil|deliver|breaker/.test(line.msg)).map((line) => line.msg)).toEqual([
      `store unreachable at redis://127.0.0.1:${port}: connection refused; retrying`
    ])
    expect(gateway.stdout() + gateway.stderr()).not.toContain(PASSWORD)
  }, 120_000)
})
