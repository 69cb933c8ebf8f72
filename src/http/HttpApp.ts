import rateLimit from "@fastify/rate-limit"
import websocket from "@fastify/websocket"
import { Duration, Effect, Exit, Runtime } from "effect"
import Fastify, { type FastifyError, type FastifyInstance } from "fastify"
import { ApiKeys } from "../apikeys/ApiKeys.js"
import type { AuthThrottle } from "../apikeys/AuthThrottle.js"
import { rateLimitKeyOf } from "./ApiAuth.js"
import { OwnershipLease } from "../kernel/OwnershipLease.js"
import { AppConfig } from "../config/AppConfig.js"
import { Environments } from "../environments/Environments.js"
import { Metrics } from "../observability/Metrics.js"
import { Deliveries } from "../webhooks/Deliveries.js"
import { registerTelephonyEntryRoutes, type TelephonyEntryServices } from "./routes/telephonyEntryRoutes.js"
import { ApiError } from "./ApiError.js"
import { registerApiDocs } from "./ApiDocs.js"
import { type ApiRoute, openApiDocument, registerApiRoutes, sendError } from "./ApiRoute.js"
import { deliveryRoutes } from "./routes/deliveryRoutes.js"
import { apiKeyRoutes, environmentRoutes } from "./routes/environmentRoutes.js"
import type { Recordings } from "../recording/Recordings.js"
import { recordingRoutes } from "./routes/recordingRoutes.js"
import { sessionRoutes } from "./routes/sessionRoutes.js"
import { agentListRoutes } from "./routes/agentListRoutes.js"
import { breakerRoutes } from "./routes/breakerRoutes.js"
import { BreakerStore } from "../breaker/BreakerStore.js"
import { registerDashboard } from "./dashboardRoutes.js"
import { agentPoolRoutes } from "./routes/agentPoolRoutes.js"
import { instanceRoutes } from "./routes/instanceRoutes.js"
import { type InstanceRegistry } from "../fleet/InstanceRegistry.js"
import { type AgentPool } from "../agent/AgentPool.js"
import { registerAgentRoutes } from "./routes/agentConnectRoutes.js"
import { type Sessions } from "../sessions/Sessions.js"
import { LiveCalls } from "../livecall/LiveCalls.js"
import { type CarrierStreams } from "../telephony/streams/CarrierStreams.js"
import { registerStreamRoutes } from "./routes/streamRoutes.js"
import type { CallControl } from "../calls/CallControl.js"
import { isTwilioApiUrl, registerTwilioCallRoutes, sendTwilioError } from "./routes/twilioCallRoutes.js"
import { TwilioErrors } from "../calls/TwilioCallWire.js"
import type { OutboundCalls } from "../calls/OutboundCalls.js"
import { callRoutes, registerOutboundCallbackRoutes } from "./routes/callRoutes.js"
import type { SocketGuards } from "../websocket/SocketGuards.js"

/** The services the HTTP edge calls into. */
export type HttpServices = OwnershipLease | AppConfig | ApiKeys | AuthThrottle | Environments | Metrics | TelephonyEntryServices | Deliveries | CallServices | BreakerStore

/** What the media streams, the agent WebSocket and the session routes need. */
type CallServices = CarrierStreams | AgentPool | Sessions | LiveCalls | CallControl | OutboundCalls | InstanceRegistry | SocketGuards | Recordings

/** Largest WebSocket message accepted from carriers and agents; a media frame is well under 1 KiB. */
export const MAX_WS_MESSAGE_BYTES = 64 * 1024

declare module "fastify" {
  interface FastifyRequest {
    /** The exact bytes of the body, for signature checks (Twilio, Telnyx). */
    rawBody?: Buffer
  }
}

/** Every /v1 JSON route, in the order the OpenAPI document lists them. */
export const apiRoutes: ReadonlyArray<ApiRoute<HttpServices>> = [
  ...agentListRoutes,
  ...environmentRoutes,
  ...agentPoolRoutes,
  ...breakerRoutes,
  ...deliveryRoutes,
  ...sessionRoutes,
  ...recordingRoutes,
  ...callRoutes,
  ...apiKeyRoutes,
  ...instanceRoutes
]

/** JSON.parse, refusing `__proto__` keys (as fastify's own parser does) so no later merge can be poisoned. */
const parseJson = (text: string): unknown =>
  text.includes("__proto__")
    ? JSON.parse(text, (key, value) => {
        if (key === "__proto__") throw new Error("forbidden key")
        return value
      })
    : JSON.parse(text)

/** The charset a Content-Type names, lower-cased; undefined when it names none. */
const charsetOf = (contentType: string | undefined) => /;\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(contentType ?? "")?.[1]?.toLowerCase()

/** JSON is UTF-8 (RFC 8259) and carriers send UTF-8 forms: any other declared charset is refused, never misread. */
const isUtf8 = (contentType: string | undefined) => {
  const charset = charsetOf(contentType)
  return charset === undefined || charset === "utf-8" || charset === "utf8" || charset === "us-ascii"
}
const notUtf8 = () =>
  Object.assign(new Error("Only UTF-8 bodies are accepted."), { code: "CHARSET_NOT_UTF8", statusCode: 415 })

const errorFromFastify = (error: FastifyError): ApiError => {
  switch (error.code) {
    case "CHARSET_NOT_UTF8":
      return ApiError.of("UNSUPPORTED_MEDIA_TYPE", "Only UTF-8 bodies are accepted: send charset=utf-8 or no charset.")
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return ApiError.of("PAYLOAD_TOO_LARGE")
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return ApiError.of("UNSUPPORTED_MEDIA_TYPE")
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
    case "FST_ERR_CTP_INVALID_JSON_BODY":
    case "MALFORMED_JSON":
      return ApiError.of("MALFORMED_JSON")
    default:
      if (error.statusCode === 429) return ApiError.of("RATE_LIMITED")
      if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
        return ApiError.of("VALIDATION_FAILED", "The request could not be read.")
      }
      return ApiError.of("INTERNAL")
  }
}

/**
 * Builds the fastify app without listening (fastify's testing guide): tests call `inject`, the
 * server layer calls `listen`. Effects run on the runtime the app was built with.
 */
export const buildApp = async (runtime: Runtime.Runtime<HttpServices>): Promise<FastifyInstance> => {
  const run = Runtime.runPromiseExit(runtime)
  const runSync = Runtime.runSync(runtime)
  const config = runSync(AppConfig)
  const metrics = runSync(Metrics)

  const headersTimeoutMs = Duration.toMillis(config.httpHeadersTimeout)
  const app = Fastify({
    logger: false,
    bodyLimit: config.httpBodyLimitBytes,
    // Slow clients (docs/security.md, "HTTP limits"): the whole request, body included, within
    // HTTP_REQUEST_TIMEOUT (Node answers 408), idle keep-alive connections closed after
    // HTTP_KEEP_ALIVE_TIMEOUT; Node checks its timeouts this often (default: every 30 s).
    requestTimeout: Duration.toMillis(config.httpRequestTimeout),
    keepAliveTimeout: Duration.toMillis(config.httpKeepAliveTimeout),
    http: { connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(headersTimeoutMs / 4))) },
    // The client address (request.ip) that the per-address limits key on: behind a trusted proxy,
    // the nearest untrusted address in X-Forwarded-For; else the TCP peer (docs/security.md,
    // "Behind a proxy"). A client cannot choose its address by sending the header itself.
    trustProxy: config.trustedProxies.length > 0 ? [...config.trustedProxies] : false,
    return503OnClosing: true,
    forceCloseConnections: "idle",
    routerOptions: { ignoreTrailingSlash: true },
    // A URL the router cannot decode (a malformed percent-encoding) is the client's error, answered
    // in the shape of the API it aimed at, never fastify's own body.
    frameworkErrors: (error, request, reply) => {
      if (isTwilioApiUrl(request.url)) return sendTwilioError(reply, TwilioErrors.badRequest("the URL is not valid"))
      const status = (error as FastifyError).statusCode ?? 400
      return sendError(reply, status < 500 ? ApiError.of("VALIDATION_FAILED", "The URL is not valid: it has a malformed percent-encoding.") : ApiError.of("INTERNAL"))
    }
  })

  app.server.headersTimeout = headersTimeoutMs

  // Bodies are kept raw for signature checks, then parsed. JSON.parse never runs user code. The
  // built-in parser would win for exactly "application/json" (exact matches go before patterns), so
  // those bodies would have no rawBody and an empty body would be an error: it is removed.
  app.removeContentTypeParser("application/json")
  app.addContentTypeParser(/^application\/([a-z.+-]*\+)?json/i, { parseAs: "buffer" }, (request, body, done) => {
    if (!isUtf8(request.headers["content-type"])) return done(notUtf8(), undefined)
    request.rawBody = body as Buffer
    if ((body as Buffer).length === 0) return done(null, undefined)
    try {
      done(null, parseJson((body as Buffer).toString("utf8")))
    } catch {
      done(Object.assign(new Error("The request body is not valid JSON."), { code: "MALFORMED_JSON", statusCode: 400 }), undefined)
    }
  })
  app.addContentTypeParser("application/x-www-form-urlencoded", { parseAs: "buffer" }, (request, body, done) => {
    if (!isUtf8(request.headers["content-type"])) return done(notUtf8(), undefined)
    request.rawBody = body as Buffer
    done(null, Object.fromEntries(new URLSearchParams((body as Buffer).toString("utf8"))))
  })

  await app.register(websocket, { options: { maxPayload: MAX_WS_MESSAGE_BYTES } })

  // Per API key (per client address without one), on /v1 only. Agent WebSocket upgrades are left
  // out: each is capacity for one live call, and refusing them would strand callers.
  if (config.rateLimitPerMinute > 0) {
    await app.register(rateLimit, {
      global: true,
      max: config.rateLimitPerMinute,
      timeWindow: 60_000,
      // After authentication (preParsing), so a request counts against the key it was let in
      // as; an invented key never gets this far: failed authentications are limited per client
      // address by AuthThrottle, whatever key they present.
      hook: "preValidation",
      keyGenerator: (request) => rateLimitKeyOf(request) ?? `ip:${request.ip}`,
      allowList: (request) => !/^\/v1(\/|\?|$)/.test(request.url) || request.headers.upgrade?.toLowerCase() === "websocket",
      errorResponseBuilder: (_request, context) =>
        ApiError.of("RATE_LIMITED", `Too many requests: at most ${context.max} per minute for this API key; retry in ${context.after}.`)
    })
  }

  app.setErrorHandler((error: FastifyError, request, reply) => {
    // Hooks (authentication, rate limiting) refuse requests by throwing an ApiError.
    if (error instanceof ApiError) return sendError(reply, error)
    const apiError = errorFromFastify(error)
    if (apiError.status >= 500) {
      void run(Effect.logError("unhandled HTTP error", { method: request.method, url: request.routeOptions.url }, error))
    }
    return sendError(reply, apiError)
  })
  app.setNotFoundHandler((_request, reply) => sendError(reply, ApiError.of("ROUTE_NOT_FOUND")))

  app.addHook("onResponse", (request, reply, done) => {
    const labels = { method: request.method, route: request.routeOptions.url ?? "unmatched", status: String(reply.statusCode) }
    metrics.httpRequests.inc(labels)
    metrics.httpDuration.observe(labels, reply.elapsedTime / 1000)
    done()
  })

  app.get("/healthz", async () => ({ status: "ok" }))
  app.get("/readyz", async (_request, reply) => {
    // A draining instance takes no new calls: load balancers should stop sending them.
    if (runSync(Effect.map(LiveCalls, (registry) => registry.isDraining()))) {
      return reply.code(503).send({ status: "draining", reason: "shutting down: live calls are finishing" })
    }
    // One whose registration the store has not taken for nearly INSTANCE_TTL takes no new call (docs/reliability.md, "Fencing").
    if (!runSync(Effect.map(OwnershipLease, (lease) => lease.takesCalls()))) {
      return reply.code(503).send({ status: "unavailable", reason: "the fleet registry has not taken this instance's refresh" })
    }
    const exit = await run(Effect.flatMap(Environments, (envs) => envs.ping).pipe(Effect.timeout("2 seconds")))
    return Exit.isSuccess(exit) ? { status: "ready" } : reply.code(503).send({ status: "unavailable", reason: "store unreachable" })
  })
  app.get("/metrics", async (_request, reply) =>
    reply.header("content-type", metrics.registry.contentType).send(await metrics.registry.metrics())
  )
  await registerApiDocs(app, openApiDocument(apiRoutes, { title: "callgate management API", version: "1.0.0" }))

  registerApiRoutes<HttpServices>(app, runtime, apiRoutes)
  await registerDashboard(app)
  registerTelephonyEntryRoutes(app, runtime)
  registerStreamRoutes(app, runtime)
  registerAgentRoutes(app, runtime)
  registerTwilioCallRoutes(app, runtime)
  registerOutboundCallbackRoutes(app, runtime)
  return app
}

/** The app, built once per layer; closed (connections drained) when the layer's scope closes. */
export class HttpApp extends Effect.Service<HttpApp>()("callgate/HttpApp", {
  scoped: Effect.gen(function* () {
    const runtime = yield* Effect.runtime<HttpServices>()
    const app = yield* Effect.acquireRelease(
      Effect.promise(() => buildApp(runtime)),
      (app) => Effect.promise(() => app.close())
    )
    return { app } as const
  })
}) {}
