import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeTestApp, type StoreKind, type TestApp } from "../support/testApp.js"

describe.each<StoreKind>(["memory", "redis"])("health endpoints (%s store)", (kind) => {
  let t: TestApp
  beforeAll(async () => {
    t = await makeTestApp(kind)
  })
  afterAll(() => t.close())

  it("GET /healthz answers ok", async () => {
    const res = await t.app.inject({ method: "GET", url: "/healthz" })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ status: "ok" })
  })

  it("GET /readyz reports the store reachable", async () => {
    const res = await t.app.inject({ method: "GET", url: "/readyz" })
    expect(res.statusCode).toBe(200)
    expect(res.json()).toEqual({ status: "ready" })
  })

  it("GET /metrics serves Prometheus text with process and HTTP metrics", async () => {
    await t.app.inject({ method: "GET", url: "/healthz" })
    const res = await t.app.inject({ method: "GET", url: "/metrics" })
    expect(res.statusCode).toBe(200)
    expect(res.headers["content-type"]).toContain("text/plain")
    expect(res.body).toContain("callgate_process_cpu_seconds_total")
    expect(res.body).toMatch(/callgate_http_requests_total\{method="GET",route="\/healthz",status="200"\} \d+/)
  })

  it("unknown routes get the error envelope", async () => {
    const res = await t.app.inject({ method: "GET", url: "/nope" })
    expect(res.statusCode).toBe(404)
    expect(res.json()).toEqual({ error: { code: "ROUTE_NOT_FOUND", message: "No such route.", details: [] } })
  })
})
