import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { call, createEnvironment, environmentsUrl, environmentUrl } from "../http/client.js"
import { makeTestApp, type TestApp, uniqueId } from "../support/testApp.js"

/** Validation errors in one house style: the field, what is wrong, what is allowed (docs/api.md, "Errors"). */
describe("validation messages", () => {
  let t: TestApp
  let agentId: string
  let environmentId: string
  beforeAll(async () => {
    t = await makeTestApp("memory")
    agentId = uniqueId("agent")
    environmentId = (await createEnvironment(t.app, agentId)).id
  })
  afterAll(() => t.close())

  const cases: ReadonlyArray<readonly [string, () => { method: string; url: string; body?: unknown }, string, string]> = [
    ["an empty name", () => ({ method: "POST", url: environmentsUrl(agentId), body: { name: "" } }), "name", "must not be empty"],
    ["a name that is not a string", () => ({ method: "POST", url: environmentsUrl(agentId), body: { name: 5 } }), "name", "must be a string"],
    ["a long name", () => ({ method: "PATCH", url: environmentUrl(agentId, environmentId), body: { name: "x".repeat(201) } }), "name", "must be at most 200 characters long"],
    ["a missing name", () => ({ method: "POST", url: environmentsUrl(agentId), body: {} }), "name", "is required"],
    ["an unknown field", () => ({ method: "PATCH", url: environmentUrl(agentId, environmentId), body: { colour: "blue" } }), "colour", "is not a known field"],
    ["an unknown status", () => ({ method: "GET", url: `/v1/agents/${agentId}/sessions?status=bogus` }), "status", "must be one of queued, ringing, active, completed, failed, timeout"],
    ["a limit that is not a number", () => ({ method: "GET", url: `/v1/agents/${agentId}/sessions?limit=abc` }), "limit", "must be an integer from 1 to 100"],
    ["an agentUrl of another scheme", () => ({ method: "PATCH", url: environmentUrl(agentId, environmentId), body: { agentUrl: "http://agent.example.com" } }), "agentUrl", "must be a wss:// (or, on your own network, ws://) URL"],
    ["a fallback type not on the list", () => ({ method: "PATCH", url: environmentUrl(agentId, environmentId), body: { errorFallbackType: "email" } }), "errorFallbackType", "must be one of disabled, phone, webhook"],
    ["an empty agent list", () => ({ method: "POST", url: "/v1/api-keys", body: { name: "k", agentIds: [] } }), "agentIds", "must not be empty"],
    ["a grace period that is not an integer", () => ({ method: "POST", url: "/v1/api-keys/key_x/rotate", body: { graceSeconds: 1.5 } }), "graceSeconds", "must be an integer from 0 to 2592000 (30 days)"]
  ]

  it.each(cases)("%s: '<field> <what is wrong and what is allowed>', no library wording", async (_name, request, field, message) => {
    const { method, url, body } = request()
    const answer = await call(t.app, method, url, body === undefined ? {} : { body })
    expect(answer.status).toBe(400)
    expect(answer.json.error.code).toBe("VALIDATION_FAILED")
    expect(answer.json.error.message).toBe(`${field} ${message}`)
    expect(answer.json.error.details[0]).toEqual({ field, message })
    expect(answer.json.error.message).not.toMatch(/Expected|actual|character\(s\)|Unable to decode/)
  })
})
