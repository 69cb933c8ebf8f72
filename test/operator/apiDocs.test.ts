import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { call } from "../http/client.js"
import { makeTestApp, type TestApp } from "../support/testApp.js"

describe("GET /docs: the API reference", () => {
  let t: TestApp
  beforeAll(async () => {
    t = await makeTestApp("memory")
  })
  afterAll(() => t.close())

  it("serves Swagger UI from the package, with no CDN, over the same OpenAPI document as /v1/openapi.json, without a key", async () => {
    const page = await t.app.inject({ method: "GET", url: "/docs" })
    expect(page.statusCode).toBe(200)
    expect(page.headers["content-type"]).toMatch(/^text\/html/)
    expect(page.body).toContain("swagger-ui")
    // Every script and stylesheet is served by callgate itself.
    const assets = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((match) => match[1]!)
    expect(assets.length).toBeGreaterThan(0)
    for (const asset of assets) expect(asset).not.toMatch(/^(https?:)?\/\//)
    for (const asset of assets.filter((a) => a.endsWith(".js") || a.endsWith(".css"))) {
      const url = new URL(asset, "http://callgate.test/docs/").pathname
      expect((await t.app.inject({ method: "GET", url })).statusCode, url).toBe(200)
    }
    const initializer = await t.app.inject({ method: "GET", url: "/docs/static/swagger-initializer.js" })
    expect(initializer.statusCode).toBe(200)

    const document = await call(t.app, "GET", "/v1/openapi.json", { key: null })
    const served = await t.app.inject({ method: "GET", url: "/docs/json" })
    expect(served.statusCode).toBe(200)
    expect(served.json()).toEqual(document.json)
    expect(Object.keys(document.json.paths)).toContain("/v1/api-keys/{keyId}/rotate")
  })
})
