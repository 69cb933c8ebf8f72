import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import fastifyStatic from "@fastify/static"
import type { FastifyInstance, FastifyReply } from "fastify"

/**
 * The dashboard (docs/dashboard.md): static files built by `npm run build` (dashboard/build.mjs) into
 * dist/dashboard, served at /dashboard. It is a client of /v1 like any other and has no route of
 * its own beyond its files.
 *
 * Every asset but index.html has a content hash in its name and is cached for a year; index.html
 * is revalidated on every load. The Content-Security-Policy allows scripts, styles and requests
 * from this origin only: no inline script, no inline style sheet, no CDN; media only from blob:
 * URLs the page made itself (a recording it fetched).
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "font-src 'self'",
  "connect-src 'self'",
  // The session page plays a call's recording from memory (fetched with the API key: docs/recording.md).
  "media-src blob:",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'"
].join("; ")

const securityHeaders = {
  "content-security-policy": DASHBOARD_CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin"
} as const

/** Where the build lands, seen from src/http (run with tsx) and from dist/src/http (npm start). */
export const dashboardDirCandidates = (): ReadonlyArray<string> => [
  fileURLToPath(new URL("../../dist/dashboard", import.meta.url)),
  fileURLToPath(new URL("../../dashboard", import.meta.url))
]

export const findDashboardDir = (): string | undefined =>
  dashboardDirCandidates().find((dir) => existsSync(join(dir, "index.html")) && existsSync(join(dir, "assets")))

const withHeaders = (reply: FastifyReply) => {
  for (const [name, value] of Object.entries(securityHeaders)) reply.header(name, value)
  return reply
}

export const registerDashboard = async (app: FastifyInstance, dir: string | undefined = findDashboardDir()) => {
  if (dir === undefined) {
    // `npm run dev` and `npm start` build it first; a bare `tsx src/main.ts` may not have.
    app.get("/dashboard", async (_request, reply) =>
      withHeaders(reply)
        .code(503)
        .type("text/plain; charset=utf-8")
        .send("The dashboard is not built: run `npm run build` (or `npm run build:dashboard`).\n")
    )
    return
  }
  const index = readFileSync(join(dir, "index.html"))
  app.get("/dashboard", async (_request, reply) =>
    withHeaders(reply).header("cache-control", "no-cache").type("text/html; charset=utf-8").send(index)
  )
  await app.register(fastifyStatic, {
    root: join(dir, "assets"),
    prefix: "/dashboard/assets/",
    decorateReply: false,
    index: false,
    list: false,
    dotfiles: "deny",
    // Hashed names: a file's content never changes under its name.
    cacheControl: true,
    immutable: true,
    maxAge: "365d",
    setHeaders: (response) => {
      for (const [name, value] of Object.entries(securityHeaders)) response.setHeader(name, value)
    }
  })
}
