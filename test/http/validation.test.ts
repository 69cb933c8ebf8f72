import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeTestApp, type StoreKind, type TestApp, uniqueId } from "../support/testApp.js"
import { call, createEnvironment, environmentsUrl, environmentUrl, expectError, expectFieldError } from "./client.js"

/** Every validation rule of the /v1 environment API, on create and on PATCH. */
describe.each<StoreKind>(["memory", "redis"])("request validation (%s store)", (kind) => {
  let t: TestApp
  let agentId: string
  let environmentId: string
  beforeAll(async () => {
    t = await makeTestApp(kind)
    agentId = uniqueId("agent")
    environmentId = (await createEnvironment(t.app, agentId)).id
  })
  afterAll(() => t.close())

  const patch = (body: unknown) => call(t.app, "PATCH", environmentUrl(agentId, environmentId), { body })
  const create = (body: unknown) => call(t.app, "POST", environmentsUrl(agentId), { body })

  describe("unknown fields", () => {
    it.each([
      ["PATCH", { name: "x", colour: "blue" }, "colour"],
      ["PATCH", { webhookSecretLast4: "abcd" }, "webhookSecretLast4"],
      ["PATCH", { id: "env_other" }, "id"],
      ["create", { name: "x", errorFallbackSecret: null }, "errorFallbackSecret"]
    ] as const)("%s %j answers 400 naming %s", async (route, body, field) => {
      const answer = route === "PATCH" ? await patch(body) : await create(body)
      const error = expectFieldError(answer, field)
      expect(error.details.find((d) => d.field === field)?.message).toBe("is not a known field")
    })

    it("clone and api-keys refuse unknown fields too", async () => {
      expectFieldError(await call(t.app, "POST", `${environmentUrl(agentId, environmentId)}/clone`, { body: { nam: "x" } }), "nam")
      expectFieldError(await call(t.app, "POST", "/v1/api-keys", { body: { name: "k", agentIds: [agentId], admin: true } }), "admin")
    })
  })

  describe("wrong types", () => {
    it.each([
      [{ name: 5 }, "name"],
      [{ name: "" }, "name"],
      [{ name: "x".repeat(201) }, "name"],
      [{ webhookUrl: 5 }, "webhookUrl"],
      [{ webhookUrl: ["https://hooks.example.com"] }, "webhookUrl"],
      [{ webhookSecret: "whsec_chosen-by-the-client" }, "webhookSecret"],
      [{ errorFallbackType: "email" }, "errorFallbackType"],
      [{ errorFallbackType: null }, "errorFallbackType"],
      [{ errorFallbackValue: 14155550100 }, "errorFallbackValue"],
      [{ errorFallbackTimeout: "5" }, "errorFallbackTimeout"],
      [{ errorFallbackTimeout: null }, "errorFallbackTimeout"],
      [{ errorFallbackOccurrenceThreshold: true }, "errorFallbackOccurrenceThreshold"],
      [{ errorFallbackTimeWindow: { seconds: 300 } }, "errorFallbackTimeWindow"],
      [{ errorFallbackWebhookSecret: "whsec_x" }, "errorFallbackWebhookSecret"],
      [{ agentUrl: 1 }, "agentUrl"]
    ] as const)("PATCH %j answers 400 naming %s", async (body, field) => {
      expectFieldError(await patch(body), field)
    })

    it("a body that is not an object answers 400", async () => {
      for (const payload of ["[]", '"name"', "42", "null"]) {
        const answer = await call(t.app, "PATCH", environmentUrl(agentId, environmentId), { payload, contentType: "application/json" })
        expectFieldError(answer, "body")
      }
    })

    it("says what is expected, in words", async () => {
      const messageFor = async (body: unknown, field: string) =>
        expectFieldError(await patch(body), field).details.find((d) => d.field === field)!.message
      expect(await messageFor({ errorFallbackType: "email" }, "errorFallbackType")).toBe("must be one of disabled, phone, webhook")
      expect(await messageFor({ webhookSecret: "whsec_x" }, "webhookSecret")).toMatch(/^only null is accepted/)
      expect(await messageFor({ errorFallbackWebhookSecret: "x" }, "errorFallbackWebhookSecret")).toMatch(/^only null is accepted/)
      const notObject = await call(t.app, "PATCH", environmentUrl(agentId, environmentId), { payload: "[]", contentType: "application/json" })
      expect(expectFieldError(notObject, "body").details).toEqual([{ field: "body", message: "must be a JSON object" }])
    })

    it("names every offending field at once", async () => {
      const error = expectFieldError(await patch({ errorFallbackTimeout: 99, errorFallbackTimeWindow: 1, extra: 1 }), "extra")
      expect(error.details.map((d) => d.field).sort()).toEqual(["errorFallbackTimeWindow", "errorFallbackTimeout", "extra"])
    })

    it("create requires a name", async () => {
      const error = expectFieldError(await create({}), "name")
      expect(error.details).toEqual([{ field: "name", message: "is required" }])
    })
  })

  describe("ranges, at both edges and just past them", () => {
    const cases = [
      ["errorFallbackTimeout", 0, 30],
      ["errorFallbackOccurrenceThreshold", 1, 20],
      ["errorFallbackTimeWindow", 60, 3600]
    ] as const

    it.each(cases)("%s accepts %i and %i", async (field, min, max) => {
      for (const value of [min, max]) {
        const answer = await patch({ [field]: value })
        expect(answer.status).toBe(200)
        expect(answer.json.data[field]).toBe(value)
      }
    })

    it.each(cases)("%s refuses %i - 1 and %i + 1", async (field, min, max) => {
      for (const value of [min - 1, max + 1]) {
        const error = expectFieldError(await patch({ [field]: value }), field)
        expect(error.details[0]!.message).toBe(`must be an integer from ${min} to ${max}`)
      }
      // Refused values are not stored.
      const read = await call(t.app, "GET", environmentUrl(agentId, environmentId))
      expect(read.json.data[field]).toBeGreaterThanOrEqual(min)
      expect(read.json.data[field]).toBeLessThanOrEqual(max)
    })

    it.each([
      ["errorFallbackTimeout", 1.5, "must be an integer from 0 to 30"],
      ["errorFallbackTimeout", 29.999, "must be an integer from 0 to 30"],
      ["errorFallbackOccurrenceThreshold", 2.5, "must be an integer from 1 to 20"],
      ["errorFallbackTimeWindow", 60.5, "must be an integer from 60 to 3600"]
    ] as const)("%s refuses the non-integer %d, saying what is allowed", async (field, value, message) => {
      const error = expectFieldError(await patch({ [field]: value }), field)
      expect(error.details[0]!.message).toBe(message)
    })

    it("create refuses out-of-range values too", async () => {
      expectFieldError(await create({ name: "x", errorFallbackOccurrenceThreshold: 0 }), "errorFallbackOccurrenceThreshold")
      expectFieldError(await create({ name: "x", errorFallbackTimeWindow: 3601 }), "errorFallbackTimeWindow")
    })
  })

  describe("URLs", () => {
    it.each([
      "http://hooks.example.com/events",
      "ftp://hooks.example.com/events",
      "wss://hooks.example.com/events",
      "hooks.example.com/events",
      "not a url",
      "https://user:pass@hooks.example.com/events",
      `https://hooks.example.com/${"a".repeat(2048)}`
    ])("webhookUrl %s is refused", async (url) => {
      const error = expectFieldError(await patch({ webhookUrl: url }), "webhookUrl")
      expect(error.message).toMatch(/^webhookUrl /)
    })

    it("agentUrl must be a ws:// or wss:// URL", async () => {
      expectFieldError(await patch({ agentUrl: "https://agent.example.com/media" }), "agentUrl")
      const answer = await patch({ agentUrl: "wss://agent.example.com/media" })
      expect(answer.status).toBe(200)
      expect((await patch({ agentUrl: null })).json.data.agentUrl).toBeNull()
    })
  })

  describe("errorFallbackValue against errorFallbackType", () => {
    it.each(["+14155550100", "+442071838750", "+81312345678"])("phone accepts the E.164 number %s", async (value) => {
      const answer = await patch({ errorFallbackType: "phone", errorFallbackValue: value })
      expect(answer.status).toBe(200)
      expect(answer.json.data).toMatchObject({ errorFallbackType: "phone", errorFallbackValue: value })
    })

    it.each(["4155550100", "+0155550100", "+1 415 555 0100", "+1-415-555-0100", "+1234567890123456", "https://fallback.example.com"])(
      "phone refuses %s",
      async (value) => {
        const error = expectFieldError(await patch({ errorFallbackType: "phone", errorFallbackValue: value }), "errorFallbackValue")
        expect(error.message).toContain("E.164")
      }
    )

    it("webhook accepts an https URL and refuses anything else", async () => {
      const ok = await patch({ errorFallbackType: "webhook", errorFallbackValue: "https://fallback.example.com/rescue" })
      expect(ok.status).toBe(200)
      for (const value of ["http://fallback.example.com/rescue", "+14155550100", "https://u:p@fallback.example.com/"]) {
        const error = expectFieldError(await patch({ errorFallbackType: "webhook", errorFallbackValue: value }), "errorFallbackValue")
        expect(error.message).toContain("https://")
      }
    })

    it("a value is refused while the type is disabled", async () => {
      await patch({ errorFallbackType: "disabled" })
      const error = expectFieldError(await patch({ errorFallbackValue: "+14155550100" }), "errorFallbackValue")
      expect(error.message).toContain("errorFallbackType")
      expectFieldError(await patch({ errorFallbackType: "disabled", errorFallbackValue: "+14155550100" }), "errorFallbackValue")
      expectFieldError(await create({ name: "x", errorFallbackValue: "+14155550100" }), "errorFallbackValue")
      // null is what disabled means, so it is accepted.
      expect((await patch({ errorFallbackValue: null })).status).toBe(200)
    })

    it("phone and webhook need a value", async () => {
      await patch({ errorFallbackType: "disabled" })
      expectFieldError(await patch({ errorFallbackType: "phone" }), "errorFallbackValue")
      expectFieldError(await create({ name: "x", errorFallbackType: "webhook" }), "errorFallbackValue")
      await patch({ errorFallbackType: "phone", errorFallbackValue: "+14155550100" })
      expectFieldError(await patch({ errorFallbackValue: null }), "errorFallbackValue")
    })

    it("changing the type re-validates the kept value against the new type", async () => {
      await patch({ errorFallbackType: "phone", errorFallbackValue: "+14155550100" })
      expectFieldError(await patch({ errorFallbackType: "webhook" }), "errorFallbackValue")
      const read = await call(t.app, "GET", environmentUrl(agentId, environmentId))
      expect(read.json.data).toMatchObject({ errorFallbackType: "phone", errorFallbackValue: "+14155550100" })
    })

    it("a refused PATCH changes nothing, not even the fields that were valid", async () => {
      const before = (await call(t.app, "GET", environmentUrl(agentId, environmentId))).json.data
      expectFieldError(await patch({ name: "half applied", errorFallbackType: "phone", errorFallbackValue: "nope" }), "errorFallbackValue")
      expect((await call(t.app, "GET", environmentUrl(agentId, environmentId))).json.data).toEqual(before)
    })
  })

  describe("ids in the path", () => {
    it("refuse characters that could escape a Redis hash tag", async () => {
      for (const bad of ["a:b", "a%7Bb%7D", "x".repeat(65)]) {
        expectFieldError(await call(t.app, "GET", environmentUrl(bad, environmentId)), "agentId")
        expectFieldError(await call(t.app, "GET", environmentUrl(agentId, bad)), "environmentId")
      }
    })
  })

  describe("request bodies", () => {
    it("malformed JSON answers 400 MALFORMED_JSON", async () => {
      for (const payload of ["{", '{"name": }', "{'name': 'x'}", '{"name":"x"} trailing']) {
        const answer = await call(t.app, "POST", environmentsUrl(agentId), { payload, contentType: "application/json" })
        expectError(answer, 400, "MALFORMED_JSON")
      }
      expectError(await call(t.app, "PATCH", environmentUrl(agentId, environmentId), { payload: "{", contentType: "application/json" }), 400, "MALFORMED_JSON")
    })

    it("a __proto__ key is refused as malformed", async () => {
      const answer = await call(t.app, "PATCH", environmentUrl(agentId, environmentId), {
        payload: '{"name":"x","__proto__":{"polluted":true}}',
        contentType: "application/json"
      })
      expectError(answer, 400, "MALFORMED_JSON")
      expect(({} as Record<string, unknown>).polluted).toBeUndefined()
    })

    it("a body over 64 KiB answers 413 PAYLOAD_TOO_LARGE; 64 KiB itself is read", async () => {
      const oversized = JSON.stringify({ name: "x".repeat(64 * 1024) })
      expectError(await call(t.app, "POST", environmentsUrl(agentId), { payload: oversized, contentType: "application/json" }), 413, "PAYLOAD_TOO_LARGE")
      expectError(await call(t.app, "PATCH", environmentUrl(agentId, environmentId), { payload: oversized, contentType: "application/json" }), 413, "PAYLOAD_TOO_LARGE")
      // Exactly the limit gets through to validation (and fails there, on the name's length).
      const padding = 64 * 1024 - JSON.stringify({ name: "" }).length
      const atLimit = JSON.stringify({ name: "x".repeat(padding) })
      expect(Buffer.byteLength(atLimit)).toBe(64 * 1024)
      expectFieldError(await call(t.app, "POST", environmentsUrl(agentId), { payload: atLimit, contentType: "application/json" }), "name")
    })

    it("a wrong content type answers 415 UNSUPPORTED_MEDIA_TYPE", async () => {
      const body = JSON.stringify({ name: "x" })
      for (const contentType of ["text/plain", "application/xml", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]) {
        const answer = await call(t.app, "POST", environmentsUrl(agentId), { payload: body, contentType })
        expectError(answer, 415, "UNSUPPORTED_MEDIA_TYPE")
      }
    })

    it("JSON with a charset or a +json type is accepted", async () => {
      const body = JSON.stringify({ name: "charset" })
      for (const contentType of ["application/json; charset=utf-8", "application/merge-patch+json"]) {
        const answer = await call(t.app, "PATCH", environmentUrl(agentId, environmentId), { payload: body, contentType })
        expect(answer.status).toBe(200)
      }
    })
  })

  describe("POST /v1/api-keys", () => {
    it("needs a name and at least one valid agent id", async () => {
      expectFieldError(await call(t.app, "POST", "/v1/api-keys", { body: { agentIds: [agentId] } }), "name")
      expectFieldError(await call(t.app, "POST", "/v1/api-keys", { body: { name: "k", agentIds: [] } }), "agentIds")
      expectFieldError(await call(t.app, "POST", "/v1/api-keys", { body: { name: "k", agentIds: "a" } }), "agentIds")
      expectFieldError(await call(t.app, "POST", "/v1/api-keys", { body: { name: "k", agentIds: ["ok", "not:ok"] } }), "agentIds.1")
    })
  })
})
