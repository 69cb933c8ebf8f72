import { Clock } from "effect"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import WebSocket from "ws"
import { call } from "../http/client.js"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { type RedisServer, startRedisServer } from "../support/redisServer.js"
import { makeTestApp, TEST_SECRETS_KEY, type TestApp, uniqueId } from "../support/testApp.js"

const until = async (check: () => Promise<boolean>) => {
  while (!(await check())) await new Promise((resolve) => setTimeout(resolve, 100))
}

describe("API key life cycle (one instance)", () => {
  let t: TestApp
  beforeAll(async () => {
    // On the TestClock: expiries and rotation graces are crossed by moving the clock, never by waiting.
    t = await makeTestApp("memory", {}, { clock: "test" })
  })
  afterAll(() => t.close())
  const clockNow = () => t.runtime.runPromise(Clock.currentTimeMillis)

  const create = async (body: Record<string, unknown>) => {
    const answer = await call(t.app, "POST", "/v1/api-keys", { body })
    expect(answer.status).toBe(201)
    return answer.json.data as { id: string; key: string; expiresAt: string | null }
  }
  const listed = async (id: string) =>
    ((await call(t.app, "GET", "/v1/api-keys")).json.data as Array<Record<string, unknown>>).find((key) => key.id === id)
  const works = async (key: string, agentId: string) => (await call(t.app, "GET", `/v1/agents/${agentId}/environments`, { key })).status

  it("lists keys with name, id, agents, created, expiry and last use, never the key or its hash; admin only", async () => {
    const agentId = uniqueId("agent")
    const created = await create({ name: "ci deployer", agentIds: [agentId] })
    expect(await listed(created.id)).toEqual({
      id: created.id,
      name: "ci deployer",
      agentIds: [agentId],
      createdAt: expect.any(String),
      expiresAt: null,
      lastUsedAt: null,
      previousKeyValidUntil: null
    })
    expect(await works(created.key, agentId)).toBe(200)
    expect((await listed(created.id))!.lastUsedAt).toEqual(expect.any(String))
    const all = JSON.stringify((await call(t.app, "GET", "/v1/api-keys")).json)
    expect(all).not.toContain(created.key.slice(4))
    expect(all).not.toContain("keyHash")
    expect((await call(t.app, "GET", "/v1/api-keys", { key: created.key })).status).toBe(403)
  })

  it("revoke: refused at once; 404 for an unknown key", async () => {
    const agentId = uniqueId("agent")
    const created = await create({ name: "leaked", agentIds: [agentId] })
    expect(await works(created.key, agentId)).toBe(200)
    expect((await call(t.app, "DELETE", `/v1/api-keys/${created.id}`)).status).toBe(204)
    expect(await works(created.key, agentId)).toBe(401)
    expect(await listed(created.id)).toBeUndefined()
    const again = await call(t.app, "DELETE", `/v1/api-keys/${created.id}`)
    expect(again.status).toBe(404)
    expect(again.json.error.message).toBe(`API key ${created.id} was not found.`)
  })

  it("rotate: a new key shown once; without grace the old key stops at once, with grace both work", async () => {
    const agentId = uniqueId("agent")
    const created = await create({ name: "rotating", agentIds: [agentId] })
    const rotated = await call(t.app, "POST", `/v1/api-keys/${created.id}/rotate`, { body: {} })
    expect(rotated.status).toBe(200)
    expect(rotated.json.data).toMatchObject({ id: created.id, name: "rotating", agentIds: [agentId], previousKeyValidUntil: null })
    const second = rotated.json.data.key as string
    expect(second).not.toBe(created.key)
    expect(await works(created.key, agentId)).toBe(401)
    expect(await works(second, agentId)).toBe(200)

    const graced = await call(t.app, "POST", `/v1/api-keys/${created.id}/rotate`, { body: { graceSeconds: 10 } })
    const third = graced.json.data.key as string
    expect(graced.json.data.previousKeyValidUntil).toEqual(expect.any(String))
    expect(await works(second, agentId)).toBe(200)
    expect(await works(third, agentId)).toBe(200)
    expect((await listed(created.id))!.previousKeyValidUntil).toBe(graced.json.data.previousKeyValidUntil)
    // The grace is ten seconds of the clock: a millisecond short of it the old key still works, at its end it stops.
    expect(Date.parse(graced.json.data.previousKeyValidUntil) - (await clockNow())).toBe(10_000)
    await t.adjustClock("9999 millis")
    expect(await works(second, agentId)).toBe(200)
    await t.adjustClock("1 millis")
    expect(await works(second, agentId)).toBe(401)
    expect(await works(third, agentId)).toBe(200)
    expect((await listed(created.id))!.previousKeyValidUntil).toBeNull()
    // Revoking cuts the old key in its grace too.
    const fourth = (await call(t.app, "POST", `/v1/api-keys/${created.id}/rotate`, { body: { graceSeconds: 3600 } })).json.data.key as string
    expect(await works(third, agentId)).toBe(200)
    expect((await call(t.app, "DELETE", `/v1/api-keys/${created.id}`)).status).toBe(204)
    expect(await works(third, agentId)).toBe(401)
    expect(await works(fourth, agentId)).toBe(401)
  })

  it("expiresAt: must be a future date-time; the key is refused once it has passed", async () => {
    const agentId = uniqueId("agent")
    const past = await call(t.app, "POST", "/v1/api-keys", { body: { name: "old", agentIds: [agentId], expiresAt: "2001-01-01T00:00:00Z" } })
    expect(past.status).toBe(400)
    expect(past.json.error.details).toEqual([{ field: "expiresAt", message: "must be in the future" }])
    const expiresAt = (await clockNow()) + 60_000
    const soon = await create({ name: "short-lived", agentIds: [agentId], expiresAt: new Date(expiresAt).toISOString() })
    expect(soon.expiresAt).toBe(new Date(expiresAt).toISOString())
    await t.adjustClock("59999 millis")
    expect(await works(soon.key, agentId)).toBe(200)
    await t.adjustClock("1 millis")
    expect(await works(soon.key, agentId)).toBe(401)
  })
})

describe("API key revocation across instances", () => {
  let redis: RedisServer
  const gateways: Array<GatewayProcess> = []
  const sockets: Array<WebSocket> = []
  beforeAll(async () => {
    redis = await startRedisServer()
  })
  afterEach(async () => {
    for (const socket of sockets.splice(0)) socket.terminate()
    await Promise.all(gateways.splice(0).map((gateway) => gateway.stop()))
  })
  afterAll(() => redis?.stop())

  it("DELETE on one instance refuses the key on the other at once and closes the key's open agent socket there", async () => {
    const ADMIN = "revoke-test-admin-key-0123"
    const env = { ADMIN_API_KEY: ADMIN, REDIS_URL: redis.url, SECRETS_KEY: TEST_SECRETS_KEY, REDIS_KEY_PREFIX: "revoke:" }
    const [a, b] = await Promise.all([spawnGateway(env), spawnGateway(env)])
    gateways.push(a!, b!)
    await Promise.all([waitForHealthy(a!, "/readyz"), waitForHealthy(b!, "/readyz")])
    const admin = { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }
    const environment = await fetch(`${a!.baseUrl}/v1/agents/agent_r/environments`, { method: "POST", headers: admin, body: JSON.stringify({ name: "r" }) })
    const environmentId = ((await environment.json()) as any).data.id as string
    const created = await fetch(`${a!.baseUrl}/v1/api-keys`, { method: "POST", headers: admin, body: JSON.stringify({ name: "worker", agentIds: ["agent_r"] }) })
    const { id, key } = ((await created.json()) as any).data as { id: string; key: string }

    // A dial-in agent on instance B with the scoped key.
    const socket = new WebSocket(`${b!.baseUrl.replace("http", "ws")}/v1/agents/agent_r/environments/${environmentId}/connect`, {
      headers: { authorization: `Bearer ${key}` }
    })
    sockets.push(socket)
    await new Promise<void>((resolve, reject) => {
      socket.once("open", () => resolve())
      socket.once("error", reject)
    })
    const closed = new Promise<{ code: number; reason: string }>((resolve) =>
      socket.once("close", (code, reason) => resolve({ code, reason: reason.toString() }))
    )
    await until(async () => {
      const capacity = await fetch(`${b!.baseUrl}/v1/agents/agent_r/environments/${environmentId}/agents`, { headers: admin })
      return (((await capacity.json()) as any).data.idle as number) === 1
    })

    expect((await fetch(`${a!.baseUrl}/v1/api-keys/${id}`, { method: "DELETE", headers: admin })).status).toBe(204)
    expect(await closed).toEqual({ code: 1008, reason: "the API key was revoked" })
    const refused = await fetch(`${b!.baseUrl}/v1/agents/agent_r/environments`, { headers: { authorization: `Bearer ${key}` } })
    expect(refused.status).toBe(401)
    const list = (await (await fetch(`${b!.baseUrl}/v1/api-keys`, { headers: admin })).json()) as any
    expect(list.data.some((k: { id: string }) => k.id === id)).toBe(false)
  }, 240_000)
})
