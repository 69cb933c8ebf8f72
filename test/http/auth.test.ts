import { createHash } from "node:crypto"
import { Effect, type ManagedRuntime, Option } from "effect"
import { Redis } from "ioredis"
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest"
import { apiRoutes } from "../../src/http/HttpApp.js"
import { apiKeyRoutes, environmentRoutes } from "../../src/http/routes/environmentRoutes.js"
import { ApiKeyStore } from "../../src/apikeys/ApiKeyStore.js"
import { keys } from "../../src/redis/keys.js"
import { ADMIN_KEY, makeTestApp, type StoreKind, type TestApp, uniqueId } from "../support/testApp.js"
import { call, createEnvironment, createScopedKey, environmentsUrl, expectError } from "./client.js"

/** A valid body for each route that takes one; routes added later get `{}` (auth is judged before the body). */
const sampleBodies: Record<string, unknown> = {
  "POST /v1/agents/:agentId/environments": { name: "from the auth matrix" },
  "PATCH /v1/agents/:agentId/environments/:environmentId": { name: "patched by the auth matrix" },
  "POST /v1/agents/:agentId/environments/:environmentId/clone": { name: "cloned by the auth matrix" }
}

/** Routes whose success status this file knows; for routes added by later work, "allowed" means not 401/403. */
const knownRoutes = new Set([...environmentRoutes, ...apiKeyRoutes].map((route) => `${route.method} ${route.path}`))

const sha256hex = (text: string) => createHash("sha256").update(text, "utf8").digest("hex")

describe.each<StoreKind>(["memory", "redis"])("authentication and authorization (%s store)", (kind) => {
  let t: TestApp
  let ownAgent: string
  let otherAgent: string
  let scopedKey: string
  beforeAll(async () => {
    // Authentication semantics only: throttling of failures is test/security/httpEdge.test.ts.
    t = await makeTestApp(kind, { REDIS_KEY_PREFIX: "callgate:", AUTH_FAILURES_PER_MINUTE: "0" })
    ownAgent = uniqueId("agent")
    otherAgent = uniqueId("agent")
    scopedKey = await createScopedKey(t.app, [ownAgent, uniqueId("agent")])
  })
  afterAll(() => t.close())

  /** A request to `route` for `agentId`, against a fresh environment of that agent. */
  const requestFor = async (route: (typeof apiRoutes)[number], agentId: string) => {
    const needsEnvironment = route.path.includes(":environmentId")
    const environmentId = needsEnvironment
      ? (await createEnvironment(t.app, agentId, { webhookUrl: "https://hooks.example.com/events" })).id
      : undefined
    const keyId = route.path.includes(":keyId")
      ? ((await call(t.app, "POST", "/v1/api-keys", { body: { name: "matrix target", agentIds: [agentId] } })).json.data.id as string)
      : undefined
    const url = route.path.replace(/:([A-Za-z0-9_]+)/g, (_, name: string) =>
      name === "agentId" ? agentId : name === "environmentId" ? environmentId! : name === "keyId" ? keyId! : uniqueId(name)
    )
    const id = `${route.method} ${route.path}`
    const body = route.path === "/v1/api-keys" ? { name: "matrix", agentIds: [agentId] } : route.body ? (sampleBodies[id] ?? {}) : undefined
    return { url, body, id }
  }

  it("the matrix covers every /v1 route of the route table", () => {
    expect(apiRoutes.length).toBeGreaterThanOrEqual(9)
    for (const route of [...environmentRoutes, ...apiKeyRoutes]) expect(apiRoutes).toContain(route)
  })

  describe.each(apiRoutes.map((route) => [`${route.method} ${route.path}`, route] as const))("%s", (_name, route) => {
    it("no key: 401 UNAUTHORIZED", async () => {
      const { body, url } = await requestFor(route, ownAgent)
      expectError(await call(t.app, route.method, url, { key: null, body }), 401, "UNAUTHORIZED")
    })

    it("wrong key, or not a bearer key: 401 UNAUTHORIZED", async () => {
      const { body, url } = await requestFor(route, ownAgent)
      expectError(await call(t.app, route.method, url, { key: "cgk_not-a-key-anyone-was-given", body }), 401, "UNAUTHORIZED")
      expectError(await call(t.app, route.method, url, { key: `${ADMIN_KEY}x`, body }), 401, "UNAUTHORIZED")
      const basic = await call(t.app, route.method, url, { key: null, body, headers: { authorization: `Basic ${ADMIN_KEY}` } })
      expectError(basic, 401, "UNAUTHORIZED")
    })

    if (route.auth === "agent") {
      it("scoped key on its own agent: allowed", async () => {
        const { body, id, url } = await requestFor(route, ownAgent)
        const answer = await call(t.app, route.method, url, { key: scopedKey, body })
        expect([401, 403]).not.toContain(answer.status)
        if (knownRoutes.has(id)) expect(answer.status).toBe(route.successStatus ?? 200)
      })

      it("scoped key on another agent: 403 FORBIDDEN", async () => {
        const { body, url } = await requestFor(route, otherAgent)
        expectError(await call(t.app, route.method, url, { key: scopedKey, body }), 403, "FORBIDDEN")
      })
    } else if (route.auth === "any") {
      it("scoped key on a route open to every key: allowed (it sees only its own agents)", async () => {
        const { body, url } = await requestFor(route, ownAgent)
        const answer = await call(t.app, route.method, url, { key: scopedKey, body })
        expect(answer.status).toBe(route.successStatus ?? 200)
      })
    } else {
      it("scoped key on an admin-only route: 403 FORBIDDEN", async () => {
        const { body, url } = await requestFor(route, ownAgent)
        expectError(await call(t.app, route.method, url, { key: scopedKey, body }), 403, "FORBIDDEN")
      })
    }

    it("admin key: allowed", async () => {
      const { body, id, url } = await requestFor(route, otherAgent)
      const answer = await call(t.app, route.method, url, { body })
      expect([401, 403]).not.toContain(answer.status)
      if (knownRoutes.has(id)) expect(answer.status).toBe(route.successStatus ?? 200)
    })
  })

  describe("GET /v1/openapi.json", () => {
    it("is readable without a key (it holds no secret), as is the /docs page over it", async () => {
      expect((await call(t.app, "GET", "/v1/openapi.json", { key: null })).status).toBe(200)
      expect((await call(t.app, "GET", "/v1/openapi.json", { key: scopedKey })).status).toBe(200)
      expect((await call(t.app, "GET", "/v1/openapi.json")).status).toBe(200)
    })
  })

  it("HEAD, which fastify adds for every GET route, is authenticated too", async () => {
    expect((await call(t.app, "HEAD", environmentsUrl(ownAgent), { key: null })).status).toBe(401)
    expect((await call(t.app, "HEAD", environmentsUrl(otherAgent), { key: scopedKey })).status).toBe(403)
    expect((await call(t.app, "HEAD", environmentsUrl(ownAgent), { key: scopedKey })).status).toBe(200)
  })

  it("authenticates before reading the body: no key with a bad or oversized body is still 401", async () => {
    const url = environmentsUrl(ownAgent)
    expectError(await call(t.app, "POST", url, { key: null, payload: "{", contentType: "application/json" }), 401, "UNAUTHORIZED")
    expectError(await call(t.app, "POST", url, { key: null, payload: "x".repeat(70_000), contentType: "application/json" }), 401, "UNAUTHORIZED")
    expectError(await call(t.app, "POST", url, { key: null, payload: "x", contentType: "text/plain" }), 401, "UNAUTHORIZED")
    expectError(await call(t.app, "POST", environmentsUrl(otherAgent), { key: scopedKey, payload: "{", contentType: "application/json" }), 403, "FORBIDDEN")
  })

  describe("POST /v1/api-keys", () => {
    const keyStore = () =>
      (t.runtime as unknown as ManagedRuntime.ManagedRuntime<ApiKeyStore, unknown>).runPromise(ApiKeyStore)

    it("shows the key once and stores only its SHA-256 hash", async () => {
      const agentId = uniqueId("agent")
      const answer = await call(t.app, "POST", "/v1/api-keys", { body: { name: "deployer", agentIds: [agentId, agentId] } })
      expect(answer.status).toBe(201)
      const shown = answer.json.data
      expect(shown).toEqual({
        id: expect.any(String),
        name: "deployer",
        agentIds: [agentId],
        createdAt: expect.any(String),
        expiresAt: null,
        key: expect.stringMatching(/^cgk_[A-Za-z0-9_-]{43}$/)
      })

      const stored = await (await keyStore()).findByHash(sha256hex(shown.key)).pipe(Effect.runPromise)
      expect(Option.isSome(stored)).toBe(true)
      expect(Option.getOrThrow(stored)).toEqual({
        id: shown.id,
        name: "deployer",
        keyHash: sha256hex(shown.key),
        agentIds: [agentId],
        createdAt: shown.createdAt
      })
      expect(JSON.stringify(Option.getOrThrow(stored))).not.toContain(shown.key)
      expect(JSON.stringify(Option.getOrThrow(stored))).not.toContain(shown.key.slice(4))

      if (kind === "redis") {
        const redis = new Redis(inject("redisUrl"))
        try {
          const raw = await redis.get(keys.apiKey(sha256hex(shown.key)))
          expect(raw).not.toBeNull()
          expect(raw).not.toContain(shown.key.slice(4))
          const [, named] = await redis.scan("0", "MATCH", `*${shown.key.slice(4)}*`, "COUNT", 100_000)
          expect(named).toEqual([])
        } finally {
          redis.disconnect()
        }
      }

      // The key works for its agent, and each creation makes a different key.
      expect((await call(t.app, "GET", environmentsUrl(agentId), { key: shown.key })).status).toBe(200)
      expectError(await call(t.app, "GET", environmentsUrl(uniqueId("agent")), { key: shown.key }), 403, "FORBIDDEN")
      const again = await call(t.app, "POST", "/v1/api-keys", { body: { name: "deployer", agentIds: [agentId] } })
      expect(again.json.data.key).not.toBe(shown.key)
      expect(again.json.data.id).not.toBe(shown.id)
    })

    it("a scoped key acts for every agent it lists and nothing else", async () => {
      const [first, second] = [uniqueId("agent"), uniqueId("agent")]
      const key = await createScopedKey(t.app, [first, second])
      for (const agentId of [first, second]) {
        const created = await call(t.app, "POST", environmentsUrl(agentId), { key, body: { name: "mine" } })
        expect(created.status).toBe(201)
      }
      expectError(await call(t.app, "POST", environmentsUrl(uniqueId("agent")), { key, body: { name: "not mine" } }), 403, "FORBIDDEN")
      expectError(await call(t.app, "POST", "/v1/api-keys", { key, body: { name: "escalate", agentIds: [uniqueId("agent")] } }), 403, "FORBIDDEN")
    })
  })
})
