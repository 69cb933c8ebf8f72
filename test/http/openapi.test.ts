import { Validator } from "@seriousme/openapi-schema-validator"
import { Effect, Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { apiRoute, openApiDocument } from "../../src/http/ApiRoute.js"
import { ApiError } from "../../src/http/ApiError.js"
import { apiRoutes } from "../../src/http/HttpApp.js"
import { makeTestApp, type StoreKind, type TestApp } from "../support/testApp.js"
import { call } from "./client.js"

/** Every `$ref` in the document, to check each points at something that exists. */
const refsIn = (value: unknown, found: Array<string> = []): Array<string> => {
  if (Array.isArray(value)) for (const item of value) refsIn(item, found)
  else if (value !== null && typeof value === "object") {
    for (const [key, inner] of Object.entries(value)) {
      if (key === "$ref" && typeof inner === "string") found.push(inner)
      else refsIn(inner, found)
    }
  }
  return found
}

const resolvePointer = (document: any, ref: string) =>
  ref
    .replace(/^#\//, "")
    .split("/")
    .map((part) => part.replace(/~1/g, "/").replace(/~0/g, "~"))
    .reduce((node, part) => (node === undefined ? undefined : node[part]), document)

describe.each<StoreKind>(["memory", "redis"])("GET /v1/openapi.json (%s store)", (kind) => {
  let t: TestApp
  let document: any
  beforeAll(async () => {
    t = await makeTestApp(kind)
    const answer = await call(t.app, "GET", "/v1/openapi.json")
    expect(answer.status).toBe(200)
    expect(answer.headers["content-type"]).toContain("application/json")
    document = answer.json
  })
  afterAll(() => t.close())

  it("is a valid OpenAPI 3.1 document", async () => {
    expect(document.openapi).toBe("3.1.0")
    const validator = new Validator()
    const result = await validator.validate(structuredClone(document))
    expect(result.errors ?? []).toEqual([])
    expect(result.valid).toBe(true)
    expect(validator.version).toBe("3.1")
  })

  it("every $ref resolves inside the document", () => {
    const refs = refsIn(document)
    expect(refs.length).toBeGreaterThan(0)
    for (const ref of refs) {
      expect(ref, ref).toMatch(/^#\//)
      expect(resolvePointer(document, ref), ref).toBeDefined()
    }
  })

  it("lists every /v1 route with its method, path parameters, body and success status", () => {
    for (const route of apiRoutes) {
      const path = route.path.replace(/:([A-Za-z0-9_]+)/g, "{$1}")
      const operation = document.paths[path]?.[route.method.toLowerCase()]
      expect(operation, `${route.method} ${path}`).toBeDefined()
      expect(operation.summary).toBe(route.summary)
      expect(operation.security).toEqual([{ bearer: [] }])
      const pathParameters = [...route.path.matchAll(/:([A-Za-z0-9_]+)/g)].map((match) => match[1])
      expect(operation.parameters.filter((p: { in: string }) => p.in === "path").map((p: { name: string }) => p.name).sort()).toEqual(
        pathParameters.sort()
      )
      expect(operation.requestBody !== undefined).toBe(route.body !== undefined)
      expect(Object.keys(operation.responses)).toEqual([String(route.successStatus ?? 200), "default"])
      expect(operation.responses.default.content["application/json"].schema).toEqual({ $ref: "#/components/schemas/Error" })
    }
    const documented = Object.entries(document.paths).flatMap(([path, operations]) =>
      Object.keys(operations as object).map((method) => `${method.toUpperCase()} ${path}`)
    )
    expect(documented.length).toBe(apiRoutes.length)
    expect(document.components.securitySchemes.bearer).toEqual({ type: "http", scheme: "bearer" })
  })

  it("documents the outbound call routes: place (201, PlaceCall body, Session) and cancel or hang up", () => {
    const calls = "/v1/agents/{agentId}/environments/{environmentId}/calls"
    const place = document.paths[calls]?.post
    expect(place.tags).toEqual(["calls"])
    expect(place.requestBody.content["application/json"].schema).toEqual({ $ref: "#/components/schemas/PlaceCall" })
    expect(place.responses["201"].content["application/json"].schema.properties.data).toEqual({ $ref: "#/components/schemas/Session" })
    const placeCall = document.components.schemas.PlaceCall
    expect(placeCall.required.sort()).toEqual(["from", "to"])
    expect(Object.keys(placeCall.properties).sort()).toEqual(["from", "machineDetection", "metadata", "provider", "timeoutSeconds", "to"])
    const cancel = document.paths[`${calls}/{sessionId}`]?.delete
    expect(cancel.parameters.map((p: { name: string }) => p.name).sort()).toEqual(["agentId", "environmentId", "sessionId"])
    expect(document.components.schemas.Environment.properties.maxConcurrentOutboundCalls).toMatchObject({ type: "number" })
    expect(document.components.schemas.Environment.properties.maxConcurrentCalls.description).toMatch(/across the fleet/)
  })

  it("carries the schemas, with the same rules the validation enforces", () => {
    const schemas = document.components.schemas
    for (const name of ["Environment", "CreateEnvironment", "UpdateEnvironment", "CloneEnvironment", "CreateApiKey", "ApiKey", "Error"]) {
      expect(schemas[name], name).toBeDefined()
    }
    const update = schemas.UpdateEnvironment
    expect(update.additionalProperties).toBe(false)
    expect(update.properties.errorFallbackTimeout).toMatchObject({ type: "integer", minimum: 0, maximum: 30 })
    expect(update.properties.errorFallbackOccurrenceThreshold).toMatchObject({ type: "integer", minimum: 1, maximum: 20 })
    expect(update.properties.errorFallbackTimeWindow).toMatchObject({ type: "integer", minimum: 60, maximum: 3600 })
    expect(JSON.stringify(update.properties.errorFallbackType)).toContain("webhook")
    expect(schemas.CreateEnvironment.required).toEqual(["name"])
    expect(schemas.Error.required).toEqual(["error"])
    expect(schemas.Error.properties.error.required.sort()).toEqual(["code", "details", "message"])
    const environment = schemas.Environment
    expect(Object.keys(environment.properties)).toEqual(
      expect.arrayContaining(["id", "agentId", "webhookUrl", "webhookSecret", "webhookSecretLast4", "errorFallbackWebhookSecret"])
    )
    expect(environment.required).not.toContain("webhookSecret")
  })
})

describe("openApiDocument", () => {
  it("stays valid when schemas use Unknown, Any or Object more than once", async () => {
    const loose = Schema.Struct({ a: Schema.Array(Schema.Unknown), b: Schema.Unknown, c: Schema.Any, d: Schema.Object, e: Schema.Object })
    const route = (path: string) =>
      apiRoute({
        method: "POST",
        path,
        summary: "loose",
        tag: "test",
        auth: "admin",
        body: loose,
        response: loose,
        // Only the document is read: the handler is never run.
        handler: () => Effect.fail(ApiError.of("INTERNAL"))
      })
    const document = openApiDocument([route("/v1/one"), route("/v1/two")], { title: "t", version: "1" })
    expect(JSON.stringify(document)).not.toContain('"$id"')
    const result = await new Validator().validate(structuredClone(document))
    expect(result.errors ?? []).toEqual([])
  })
})
