import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeTestApp, type StoreKind, type TestApp, uniqueId } from "../support/testApp.js"
import { call, createScopedKey, environmentsUrl, expectError } from "./client.js"

const LIMIT = 5

describe.each<StoreKind>(["memory", "redis"])("rate limiting of /v1 (%s store)", (kind) => {
  let t: TestApp
  let agentId: string
  let scopedKey: string
  beforeAll(async () => {
    t = await makeTestApp(kind, { RATE_LIMIT_PER_MINUTE: String(LIMIT), AUTH_FAILURES_PER_MINUTE: String(LIMIT) })
    agentId = uniqueId("agent")
    // Creating the scoped key spends one of the admin key's requests.
    scopedKey = await createScopedKey(t.app, [agentId])
  })
  afterAll(() => t.close())

  it("answers 429 RATE_LIMITED once a key has spent its requests for the minute, per key", async () => {
    for (let i = 1; i < LIMIT; i++) {
      const answer = await call(t.app, "GET", environmentsUrl(agentId))
      expect(answer.status).toBe(200)
      expect(answer.headers["x-ratelimit-limit"]).toBe(String(LIMIT))
    }
    const limited = await call(t.app, "GET", environmentsUrl(agentId))
    const error = expectError(limited, 429, "RATE_LIMITED")
    expect(error.message).toContain(`${LIMIT} per minute`)
    expect(Number(limited.headers["retry-after"])).toBeGreaterThan(0)
    // Every route shares the key's budget.
    expectError(await call(t.app, "POST", environmentsUrl(agentId), { body: { name: "x" } }), 429, "RATE_LIMITED")
    // The OpenAPI document is public: it is counted per client address, never against the key.
    expect((await call(t.app, "GET", "/v1/openapi.json")).status).toBe(200)

    // Another key has its own budget.
    expect((await call(t.app, "GET", environmentsUrl(agentId), { key: scopedKey })).status).toBe(200)
  })

  it("limits requests without a key by client address, and leaves health and metrics alone", async () => {
    for (let i = 0; i < LIMIT; i++) expectError(await call(t.app, "GET", environmentsUrl(agentId), { key: null }), 401, "UNAUTHORIZED")
    expectError(await call(t.app, "GET", environmentsUrl(agentId), { key: null }), 429, "RATE_LIMITED")
    for (let i = 0; i < LIMIT * 2; i++) {
      expect((await t.app.inject({ method: "GET", url: "/healthz" })).statusCode).toBe(200)
      expect((await t.app.inject({ method: "GET", url: "/readyz" })).statusCode).toBe(200)
    }
  })
})

describe("rate limiting turned off", () => {
  it("RATE_LIMIT_PER_MINUTE=0 never answers 429", async () => {
    const t = await makeTestApp("memory", { RATE_LIMIT_PER_MINUTE: "0" })
    try {
      const agentId = uniqueId("agent")
      for (let i = 0; i < 30; i++) expect((await call(t.app, "GET", environmentsUrl(agentId))).status).toBe(200)
    } finally {
      await t.close()
    }
  })
})
