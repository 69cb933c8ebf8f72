import { JSONSchema, type Schema } from "effect"
import { ErrorBody } from "./ApiError.js"
import type { ApiRoute } from "./ApiRoute.js"

const toOpenApiPath = (path: string) => path.replace(/:([A-Za-z0-9_]+)/g, "{$1}")

/** The OpenAPI 3.1 document, generated from the route table's schemas. */
export const openApiDocument = (routes: ReadonlyArray<ApiRoute<any>>, info: { title: string; version: string }) => {
  const definitions: Record<string, any> = {}
  const jsonSchema = (schema: Schema.Schema<any, any>) =>
    JSONSchema.fromAST(schema.ast, {
      definitions,
      definitionPath: "#/components/schemas/",
      target: "openApi3.1"
    })
  const envelope = (schema: Schema.Schema<any, any> | undefined) => ({
    type: "object",
    required: ["data"],
    properties: { data: schema ? jsonSchema(schema) : {} }
  })
  const errorSchema = jsonSchema(ErrorBody)
  const paths: Record<string, Record<string, unknown>> = {}
  for (const route of routes) {
    const path = toOpenApiPath(route.path)
    const parameters: Array<unknown> = []
    const addParameters = (schema: Schema.Schema<any, any> | undefined, location: "path" | "query") => {
      if (!schema) return
      const object = jsonSchema(schema) as { properties?: Record<string, unknown>; required?: Array<string> }
      for (const [name, property] of Object.entries(object.properties ?? {})) {
        parameters.push({ name, in: location, required: location === "path" || (object.required ?? []).includes(name), schema: property })
      }
    }
    addParameters(route.params, "path")
    addParameters(route.query, "query")
    const status = String(route.successStatus ?? 200)
    paths[path] ??= {}
    paths[path]![route.method.toLowerCase()] = {
      summary: route.summary,
      tags: [route.tag],
      security: [{ bearer: [] }],
      parameters,
      ...(route.body ? { requestBody: { required: true, content: { "application/json": { schema: jsonSchema(route.body) } } } } : {}),
      responses: {
        [status]:
          status === "204"
            ? { description: "Done" }
            : route.produces !== undefined
              ? { description: route.produces.description, content: { [route.produces.contentType]: { schema: { type: "string", format: "binary" } } } }
              : { description: "Success", content: { "application/json": { schema: envelope(route.response) } } },
        default: { description: "Error", content: { "application/json": { schema: errorSchema } } }
      }
    }
  }
  return withoutPlaceholderIds({
    openapi: "3.1.0",
    info,
    paths,
    components: {
      schemas: definitions,
      securitySchemes: { bearer: { type: "http", scheme: "bearer" } }
    }
  })
}

/**
 * Effect's JSONSchema marks `Schema.Unknown`, `Schema.Any` and `Schema.Object` with placeholder
 * ids (`"$id": "/schemas/unknown"`); used twice, the same `$id` makes the document invalid
 * OpenAPI 3.1 (JSON Schema 2020-12 ids must be unique). They identify nothing, so they go.
 */
const withoutPlaceholderIds = <A>(value: A): A => {
  if (Array.isArray(value)) return value.map(withoutPlaceholderIds) as A
  if (value === null || typeof value !== "object") return value
  return Object.fromEntries(
    Object.entries(value)
      .filter(([key, inner]) => !(key === "$id" && typeof inner === "string" && inner.startsWith("/schemas/")))
      .map(([key, inner]) => [key, withoutPlaceholderIds(inner)])
  ) as A
}
