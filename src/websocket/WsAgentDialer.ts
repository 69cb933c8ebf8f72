import { Duration, Effect, Layer } from "effect"
import { WebSocket } from "ws"
import { AppConfig } from "../config/AppConfig.js"
import { describeRefusal, hostRefusal } from "../egress/AddressPolicy.js"
import { guardedLookup, RefusedAddressError, type Resolver } from "../egress/GuardedLookup.js"
import { HardError } from "../kernel/HardError.js"
import type { SocketGate } from "./SocketGate.js"
import { counterOn, Metrics } from "../observability/Metrics.js"
import { SocketGuards } from "./SocketGuards.js"
import { wsWireSocket } from "./WsWireSocket.js"
import { AgentConnection } from "../agent/AgentConnection.js"
import { AgentDialer } from "../agent/AgentDialer.js"

/** Same limit as the server side (HttpApp MAX_WS_MESSAGE_BYTES). */
const AGENT_MAX_MESSAGE_BYTES = 64 * 1024

/**
 * What a failed dial-out shows through /v1 and the fallback webhook (docs/security.md, "Outbound
 * connections"): one of three fixed categories, never the remote's words, so agentUrl cannot be
 * used to read what answers at an address. Operators get the detail in logs and metrics.
 */
export type DialFailureCategory = "agent_unreachable" | "agent_refused" | "agent_protocol_error"

const publicMessage: Record<DialFailureCategory, string> = {
  agent_unreachable: "agent_unreachable: no connection could be made to the environment's agentUrl.",
  agent_refused: "agent_refused: the environment's agentUrl was refused (destination not allowed, or the upgrade was answered with an HTTP error).",
  agent_protocol_error: "agent_protocol_error: the environment's agentUrl did not complete a WebSocket handshake."
}

interface DialFailure {
  readonly category: DialFailureCategory
  /** Low-cardinality reason for the metric label. */
  readonly reason: string
  /** For operators' logs only. */
  readonly detail: string
}

/** Where the URL points, without path or query (which may carry credentials). */
const describeTarget = (url: string) => {
  try {
    return new URL(url).host
  } catch {
    return "an invalid URL"
  }
}

const UNREACHABLE_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EPIPE",
  "ECONNABORTED"
])

const classify = (error: Error): DialFailure => {
  let current: unknown = error
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    if (current instanceof RefusedAddressError) return { category: "agent_refused", reason: "refused_address", detail: current.message }
    const code = (current as { code?: unknown }).code
    if (typeof code === "string" && UNREACHABLE_CODES.has(code)) return { category: "agent_unreachable", reason: code, detail: error.message }
    current = (current as { cause?: unknown }).cause
  }
  if (/^Unexpected server response: \d+/.test(error.message)) {
    return { category: "agent_refused", reason: "http_status", detail: error.message }
  }
  if (/socket hang up/i.test(error.message)) return { category: "agent_protocol_error", reason: "hang_up", detail: error.message }
  if ((error as { code?: unknown }).code !== undefined && /^(CERT|ERR_TLS|DEPTH_ZERO|SELF_SIGNED|UNABLE_TO)/.test(String((error as { code?: unknown }).code))) {
    return { category: "agent_unreachable", reason: "tls", detail: error.message }
  }
  return { category: "agent_protocol_error", reason: "handshake", detail: error.message }
}

export interface DialerOptions {
  /** AGENT_ALLOW_PRIVATE_NETWORKS: ws:// and private destinations allowed (development, tests). */
  readonly allowPrivateNetworks: boolean
  /** Name resolution; default: the system resolver. Tests inject one. */
  readonly resolveHost?: Resolver
  /** Per-socket limits for each dialled socket (SocketGuards). */
  readonly gate?: () => SocketGate
  /** Told about every failed dial (metrics, logs). */
  readonly onFailure?: (failure: DialFailure, target: string) => Effect.Effect<void>
}

/**
 * Dial-out: opens a WebSocket to the environment's agentUrl for one call. Refused before any
 * connection when the URL is ws:// or names a private, loopback, link-local, CGNAT or metadata
 * address (unless private networks are allowed; metadata never); names are resolved inside the
 * socket's own lookup and every address checked there; redirects are never followed. Fails with a
 * HardError (agent_dial_failed) whose message is a fixed category, when the connection is refused,
 * the handshake is answered with anything but 101, or it takes longer than `timeout`.
 * Interrupting the dial closes the socket.
 */
export const makeAgentDialer = (options: DialerOptions) => {
  const lookup = guardedLookup(options.allowPrivateNetworks, options.resolveHost)

  const connect = (url: string, timeout: Duration.Duration): Effect.Effect<AgentConnection, DialFailure> =>
    Effect.async<AgentConnection, DialFailure>((resume) => {
      let settled = false
      let timer: ReturnType<typeof setTimeout> | undefined
      const settle = (effect: Effect.Effect<AgentConnection, DialFailure>) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        resume(effect)
      }
      const failed = (failure: DialFailure) => settle(Effect.fail(failure))

      let parsed: URL
      try {
        parsed = new URL(url)
      } catch {
        return failed({ category: "agent_refused", reason: "invalid_url", detail: "the agentUrl is not a valid URL" })
      }
      if (parsed.protocol !== "wss:" && !(parsed.protocol === "ws:" && options.allowPrivateNetworks)) {
        return failed({ category: "agent_refused", reason: "scheme", detail: `${parsed.protocol} URLs are not allowed` })
      }
      if (parsed.username !== "" || parsed.password !== "") {
        return failed({ category: "agent_refused", reason: "credentials", detail: "URLs with credentials are not allowed" })
      }
      // The socket skips its lookup for IP literals, so they are checked here.
      const refusal = hostRefusal(parsed, options.allowPrivateNetworks)
      if (refusal !== undefined) {
        return failed({ category: "agent_refused", reason: "refused_address", detail: `the destination is ${describeRefusal(refusal)}` })
      }

      let ws: WebSocket
      try {
        ws = new WebSocket(url, {
          handshakeTimeout: Duration.toMillis(timeout),
          maxPayload: AGENT_MAX_MESSAGE_BYTES,
          perMessageDeflate: false,
          followRedirects: false,
          lookup
        })
      } catch (error) {
        return failed(classify(error as Error))
      }
      const connection = new AgentConnection(wsWireSocket(ws, undefined, options.gate?.()))
      timer = setTimeout(() => {
        ws.terminate()
        failed({ category: "agent_unreachable", reason: "timeout", detail: `no connection within ${Duration.format(timeout)}` })
      }, Duration.toMillis(timeout))
      ws.once("open", () => settle(Effect.succeed(connection)))
      ws.once("error", (error) => failed(classify(error)))
      ws.once("close", () => failed({ category: "agent_protocol_error", reason: "closed", detail: "the connection closed during the handshake" }))
      return Effect.sync(() => {
        clearTimeout(timer)
        if (!settled) ws.terminate()
      })
    })

  const dial = (url: string, timeout: Duration.Duration): Effect.Effect<AgentConnection, HardError> =>
    connect(url, timeout).pipe(
      Effect.tapError((failure) => options.onFailure?.(failure, describeTarget(url)) ?? Effect.void),
      Effect.mapError((failure) => new HardError({ kind: "agent_dial_failed", message: publicMessage[failure.category] }))
    )

  return AgentDialer.of({ dial })
}

/** The AgentDialer port over `ws`, with AGENT_ALLOW_PRIVATE_NETWORKS and a failure counter. */
export const WsAgentDialerLive = Layer.effect(
  AgentDialer,
  Effect.gen(function* () {
    const config = yield* AppConfig
    const metrics = yield* Metrics
    const guards = yield* SocketGuards
    const failures = counterOn(metrics.registry, "callgate_agent_dial_failures_total", "Dial-out agent connections that failed, by category and reason", ["category", "reason"])
    return makeAgentDialer({
      allowPrivateNetworks: config.agentAllowPrivateNetworks,
      gate: () => guards.gate("agent"),
      onFailure: (failure, target) =>
        Effect.zipRight(
          Effect.sync(() => failures.inc({ category: failure.category, reason: failure.reason })),
          Effect.logWarning("dial-out to the agent failed", { target, category: failure.category, reason: failure.reason, detail: failure.detail })
        )
    })
  })
)
