import swagger from "@fastify/swagger"
import swaggerUi from "@fastify/swagger-ui"
import type { FastifyInstance } from "fastify"

/**
 * The API reference (docs/api.md, "The API reference"): `GET /v1/openapi.json`, the OpenAPI
 * document generated from the route table, and `GET /docs`, Swagger UI over that same document,
 * served from the @fastify/swagger-ui package (no CDN). Both are readable without a key: the
 * document describes routes and schemas and holds no secret. The page's "Authorize" button takes
 * a key for trying routes out; it stays in the browser.
 */
export const registerApiDocs = async (app: FastifyInstance, document: Record<string, unknown>) => {
  await app.register(swagger, { mode: "static", specification: { document: document as never } })
  await app.register(swaggerUi, {
    routePrefix: "/docs",
    uiConfig: { docExpansion: "list", deepLinking: true, persistAuthorization: false },
    staticCSP: true
  })
  app.get("/v1/openapi.json", async () => document)
}
