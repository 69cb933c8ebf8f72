/**
 * How example agents reach callgate: a dial-in pool that keeps N sockets open to the /connect
 * endpoint (one socket = capacity for one call, reopened after each call), or a dial-out server
 * for environments with an `agentUrl` (callgate connects per call). See docs/calls.md, "Agents".
 */
import { EventEmitter } from "node:events"
import { readFileSync } from "node:fs"
import { createServer as createHttpServer, type Server } from "node:http"
import { createServer as createHttpsServer } from "node:https"
import type { IncomingMessage } from "node:http"
import type { AddressInfo } from "node:net"
import { resolve } from "node:path"
import { pathToFileURL } from "node:url"
import { type ClientOptions, WebSocket, WebSocketServer } from "ws"
import { AgentCall, type CallStart } from "./agent-runtime.js"

/** callgate's dial-in endpoint for an agent environment, as a ws:// or wss:// URL. */
export const agentConnectUrl = (gatewayUrl: string, agentId: string, environmentId: string) => {
  const url = new URL(
    `v1/agents/${encodeURIComponent(agentId)}/environments/${encodeURIComponent(environmentId)}/connect`,
    gatewayUrl.endsWith("/") ? gatewayUrl : `${gatewayUrl}/`
  )
  url.protocol = url.protocol === "https:" || url.protocol === "wss:" ? "wss:" : "ws:"
  return url.toString()
}

export interface DialInOptions {
  /** The /connect URL (see agentConnectUrl), or any relay speaking the agent dialect. */
  readonly url: string
  /** Sent as `Authorization: Bearer <apiKey>`. */
  readonly apiKey?: string
  /** Sockets kept open: calls this worker can take at once. Default 1. */
  readonly capacity?: number
  /** Wait before reopening a socket after a call; doubled (up to `maxReconnectDelayMs`) after each failed attempt. Default 100 ms. */
  readonly reconnectDelayMs?: number
  /** The longest wait between failed attempts. Default 30 s. */
  readonly maxReconnectDelayMs?: number
  readonly wsOptions?: ClientOptions
  /** Stamp outgoing frames (FrameStamp) with the call's index as call id. */
  readonly stampFrames?: boolean
}

export interface DialInEvents {
  /** A socket is open and waiting for a call. */
  ready: [number]
  /** A socket could not be opened (5xx, 429, network error); it is retried with back-off. */
  connectError: [string]
  /**
   * callgate refused the socket for a reason a retry cannot fix (401 bad key, 403 key of another
   * agent, 404 unknown agent or environment): the pool stops. The text is the server's own message.
   */
  fatal: [ConnectRefusal]
  call: [AgentCall]
}

/** An upgrade callgate refused, with the message of its JSON error envelope when it sent one. */
export interface ConnectRefusal {
  readonly status: number
  readonly code: string | undefined
  readonly message: string
}

/** Refusals a retry cannot fix: the key, its scope or the address is wrong. */
const FATAL_STATUSES = new Set([401, 403, 404])

/** Back-off after failed attempts: doubles from `reconnectDelayMs` up to this (unless `maxReconnectDelayMs` says), with jitter. */
const MAX_BACKOFF_MS = 30_000

/** Reads the refusal's body (callgate's `{"error":{"code","message"}}`), at most 16 KB. */
const readRefusal = (response: IncomingMessage): Promise<ConnectRefusal> =>
  new Promise((resolve) => {
    const status = response.statusCode ?? 0
    const chunks: Array<Buffer> = []
    let size = 0
    const done = () => {
      const text = Buffer.concat(chunks).toString("utf8").trim()
      let code: string | undefined
      let message = text
      try {
        const body = JSON.parse(text)
        if (typeof body?.error?.message === "string") message = body.error.message
        if (typeof body?.error?.code === "string") code = body.error.code
      } catch {
        // not JSON: the raw text (a proxy's page, say) is the best we have
      }
      resolve({ status, code, message: message.slice(0, 300) || (response.statusMessage ?? "") })
    }
    response.on("data", (chunk: Buffer) => {
      if (size < 16 * 1024) chunks.push(chunk)
      size += chunk.length
    })
    response.once("end", done)
    response.once("error", done)
    response.once("close", done)
  })

export const describeRefusal = (refusal: ConnectRefusal) =>
  `${refusal.status}${refusal.code ? ` ${refusal.code}` : ""}${refusal.message ? `: ${refusal.message}` : ""}`

/**
 * Keeps `capacity` sockets open to callgate. Each socket is handed to the caller's code as an
 * AgentCall once it opens; when it closes (the call ended, or callgate pruned it), it is reopened.
 */
export class DialInPool extends EventEmitter<DialInEvents> {
  private readonly sockets = new Set<WebSocket>()
  private readonly timers = new Set<NodeJS.Timeout>()
  private stopped = false
  private calls = 0
  private idle = 0

  constructor(private readonly options: DialInOptions) {
    super()
  }

  start() {
    for (let i = 0; i < (this.options.capacity ?? 1); i++) this.open(0)
    return this
  }

  /** Sockets opening, open or closing. */
  get openSockets() {
    return this.sockets.size
  }

  /** Closed, by `close()` or after a refusal no retry can fix. */
  get isStopped() {
    return this.stopped
  }

  /** Sockets open and not yet carrying a call. */
  get idleSockets() {
    return this.idle
  }

  /** Resolves once `count` sockets (default: the capacity) are open and idle. */
  waitForIdle(count = this.options.capacity ?? 1, timeoutMs = 10_000): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.idle >= count) return resolve()
      const timer = setTimeout(() => {
        this.off("ready", check)
        reject(new Error(`only ${this.idle} of ${count} agent sockets open after ${timeoutMs} ms`))
      }, timeoutMs)
      const check = () => {
        if (this.idle < count) return
        clearTimeout(timer)
        this.off("ready", check)
        resolve()
      }
      this.on("ready", check)
    })
  }

  async close() {
    this.stopped = true
    for (const timer of this.timers) clearTimeout(timer)
    this.timers.clear()
    const closing = [...this.sockets].map(
      (socket) =>
        new Promise<void>((resolve) => {
          if (socket.readyState === WebSocket.CLOSED) return resolve()
          socket.once("close", () => resolve())
          socket.terminate()
        })
    )
    await Promise.all(closing)
  }

  private open(failures: number) {
    if (this.stopped) return
    const headers: Record<string, string> = this.options.apiKey !== undefined ? { authorization: `Bearer ${this.options.apiKey}` } : {}
    const socket = new WebSocket(this.options.url, { ...this.options.wsOptions, headers: { ...this.options.wsOptions?.headers, ...headers } })
    this.sockets.add(socket)
    let opened = false
    let carried = false
    socket.once("open", () => {
      opened = true
      this.idle++
      const call = new AgentCall(socket, this.options.stampFrames ? { stampCallId: ++this.calls } : {})
      call.once("start", () => {
        carried = true
        this.idle--
      })
      this.emit("call", call)
      this.emit("ready", this.idle)
    })
    let refused: Promise<ConnectRefusal> | undefined
    // ws emits this instead of "error" when a listener is attached: the body carries callgate's reason.
    socket.once("unexpected-response", (_request, response) => {
      refused = readRefusal(response).then((refusal) => {
        socket.terminate()
        return refusal
      })
    })
    socket.on("error", (error) => {
      if (!opened && refused === undefined && !this.stopped) this.emit("connectError", error.message)
    })
    socket.once("close", async () => {
      this.sockets.delete(socket)
      if (opened && !carried) this.idle--
      if (refused !== undefined) {
        const refusal = await refused
        if (FATAL_STATUSES.has(refusal.status)) {
          if (this.stopped) return
          this.emit("fatal", refusal)
          void this.close()
          return
        }
        this.emit("connectError", describeRefusal(refusal))
      }
      if (this.stopped) return
      const nextFailures = opened ? 0 : failures + 1
      const base = Math.min(this.options.maxReconnectDelayMs ?? MAX_BACKOFF_MS, (this.options.reconnectDelayMs ?? 100) * 2 ** Math.min(nextFailures, 16))
      // Full back-off after failures, with up to 20 % jitter so a fleet of workers does not retry in step.
      const delay = nextFailures === 0 ? base : Math.round(base * (0.8 + Math.random() * 0.2))
      const timer = setTimeout(() => {
        this.timers.delete(timer)
        this.open(nextFailures)
      }, delay)
      this.timers.add(timer)
    })
  }
}

export interface DialOutOptions {
  readonly port?: number
  readonly host?: string
  /** PEM certificate and key: serve wss:// (callgate requires wss:// agent URLs outside tests). */
  readonly tls?: { readonly cert: string | Buffer; readonly key: string | Buffer }
  readonly stampFrames?: boolean
}

export interface DialOutServer {
  /** The agentUrl to configure on the environment. */
  readonly url: string
  readonly port: number
  readonly close: () => Promise<void>
}

/** Listens for callgate's per-call connections (environments with `agentUrl`). */
export const startDialOutServer = (options: DialOutOptions, onCall: (call: AgentCall) => void): Promise<DialOutServer> =>
  new Promise((resolve, reject) => {
    const server: Server = options.tls ? createHttpsServer({ cert: options.tls.cert, key: options.tls.key }) : createHttpServer()
    const wss = new WebSocketServer({ server, maxPayload: 64 * 1024 })
    let calls = 0
    wss.on("connection", (socket) => onCall(new AgentCall(socket, options.stampFrames ? { stampCallId: ++calls } : {})))
    server.once("error", reject)
    server.listen(options.port ?? 0, options.host ?? "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      const host = options.host ?? "127.0.0.1"
      resolve({
        url: `${options.tls ? "wss" : "ws"}://${host.includes(":") ? `[${host}]` : host}:${port}/`,
        port,
        close: () =>
          new Promise<void>((done) => {
            for (const client of wss.clients) client.terminate()
            wss.close()
            server.close(() => done())
          })
      })
    })
  })

export interface AgentConnectionOptions {
  /** callgate's base URL; with agentId and environmentId gives the /connect URL. */
  readonly gatewayUrl?: string
  readonly agentId?: string
  readonly environmentId?: string
  /** The full dial-in URL, instead of the three above (e.g. a bare relay's agent URL). */
  readonly url?: string
  /** Bearer API key for /connect. */
  readonly apiKey?: string
  /** Dial-in sockets kept open. Default 1. */
  readonly capacity?: number
  readonly reconnectDelayMs?: number
  /** The longest wait between failed attempts to reopen a socket. Default 30 s. */
  readonly maxReconnectDelayMs?: number
  /** Serve dial-out connections instead of dialing in. */
  readonly dialOut?: DialOutOptions
  /** Stamp outgoing audio frames (FrameStamp) for delay measurement. */
  readonly stampFrames?: boolean
}

/** Dial-in pool or dial-out server, whichever the options ask for; calls go to `onCall`. */
export class AgentHost<Events extends Record<keyof Events, Array<any>>> extends EventEmitter<Events> {
  pool: DialInPool | undefined
  server: DialOutServer | undefined

  protected async listen(options: AgentConnectionOptions, onCall: (call: AgentCall) => void): Promise<void> {
    if (options.dialOut) {
      this.server = await startDialOutServer({ ...options.dialOut, stampFrames: options.stampFrames ?? false }, onCall)
      return
    }
    const url = options.url ?? agentConnectUrl(options.gatewayUrl ?? "http://127.0.0.1:8080", need(options.agentId, "agentId"), need(options.environmentId, "environmentId"))
    this.pool = new DialInPool({
      url,
      apiKey: options.apiKey,
      capacity: options.capacity ?? 1,
      reconnectDelayMs: options.reconnectDelayMs,
      maxReconnectDelayMs: options.maxReconnectDelayMs,
      stampFrames: options.stampFrames ?? false
    })
    this.pool.on("call", onCall)
    this.pool.on("connectError", (message) => (this as EventEmitter).emit("connectError", message))
    this.pool.on("fatal", (refusal) => (this as EventEmitter).emit("fatal", refusal))
    this.pool.start()
  }

  /** Resolves when every dial-in socket is open and idle (at once for dial-out). */
  ready(timeoutMs = 10_000): Promise<void> {
    return this.pool ? this.pool.waitForIdle(undefined, timeoutMs) : Promise.resolve()
  }

  async close(): Promise<void> {
    await this.pool?.close()
    await this.server?.close()
  }
}

const need = (value: string | undefined, name: string) => {
  if (!value) throw new Error(`${name} is required (or give the full url)`)
  return value
}

/**
 * `--key`, else `CALLGATE_API_KEY`. A dial-in agent without a key would only be refused (and an empty
 * `--key "$UNSET_VARIABLE"` is the usual way to get there), so that is an error before connecting.
 */
const apiKeyFlag = (flags: Map<string, string>, keyOptional: boolean): string | undefined => {
  const given = flags.get("key")
  if (given === "true") throw new Error("--key needs a value")
  const key = given ?? process.env.CALLGATE_API_KEY
  if (given !== undefined && given.trim() === "") throw new Error("--key is empty (was it given as an unset variable?)")
  if (!keyOptional && (key === undefined || key.trim() === "")) {
    throw new Error("a dial-in agent needs an API key: --key KEY or CALLGATE_API_KEY (the admin key or a key created for the agent)")
  }
  return key === undefined || key.trim() === "" ? undefined : key
}

/** Options shared by the example CLIs, read from `--flags`. */
export const connectionFlags = (flags: Map<string, string>): AgentConnectionOptions => {
  const dialOutPort = flags.get("dial-out")
  const tlsCert = flags.get("tls-cert")
  const tlsKey = flags.get("tls-key")
  return {
    gatewayUrl: flags.get("gateway") ?? "http://127.0.0.1:8080",
    agentId: flags.get("agent"),
    environmentId: flags.get("environment"),
    url: flags.get("url"),
    apiKey: apiKeyFlag(flags, dialOutPort !== undefined || flags.has("url")),
    capacity: Number(flags.get("capacity") ?? 1),
    dialOut:
      dialOutPort !== undefined
        ? {
            port: Number(dialOutPort),
            host: flags.get("host") ?? "127.0.0.1",
            ...(tlsCert && tlsKey ? { tls: { cert: readFileSync(tlsCert), key: readFileSync(tlsKey) } } : {})
          }
        : undefined
  }
}

export const optionalNumber = (flags: Map<string, string>, name: string): number | undefined => {
  const text = flags.get(name)
  if (text === undefined) return undefined
  const value = Number(text)
  if (!Number.isFinite(value) || value < 0) throw new Error(`--${name} must be a number >= 0, got "${text}"`)
  return value
}

export const isMain = (url: string) => process.argv[1] !== undefined && url === pathToFileURL(resolve(process.argv[1])).href

/** The `call ... started` log line: the ids the call-control API needs (docs/calls.md) are on it. */
export const describeStart = (start: CallStart) => {
  const p = start.customParameters
  return (
    `${p.sessionId ?? start.callSid} started (${p.provider ?? "?"}, ${p.direction ?? "?"}, from ${p.from ?? "?"} to ${p.to ?? "?"}; ` +
    `callSid ${start.callSid || "?"}, accountSid ${start.accountSid || "?"})`
  )
}

/**
 * The example CLIs' connection reporting: a retryable failure is one line and a retry; a refusal
 * no retry can fix (wrong key, another agent's key, unknown environment) prints callgate's own
 * message and exits 1, so a misconfigured worker does not hammer the gateway.
 */
export const reportConnection = (agent: EventEmitter, name: string, log: (message: string) => void) => {
  agent.on("connectError", (message: string) => log(`cannot connect: ${message} (retrying with back-off)`))
  agent.on("fatal", (refusal: ConnectRefusal) => {
    const hint =
      refusal.status === 401
        ? " Check --key (or CALLGATE_API_KEY): it must be the admin key or a key created for this agent."
        : refusal.status === 403
          ? " The key belongs to another agent."
          : " Check --gateway, --agent and --environment."
    process.stderr.write(`${name}: callgate refused the connection: ${describeRefusal(refusal)}.${hint} Stopping.\n`)
    process.exitCode = 1
    void (agent as AgentHost<any>).close().then(() => process.exit(1))
  })
}

export const stopOnSignal = (close: () => Promise<void>) => {
  const stop = () => void close().then(() => process.exit(0))
  process.once("SIGINT", stop)
  process.once("SIGTERM", stop)
}

/** `--name value` flags for the example CLIs. */
export const readFlags = (argv: ReadonlyArray<string>): Map<string, string> => {
  const flags = new Map<string, string>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (!arg.startsWith("--")) continue
    const next = argv[i + 1]
    if (next === undefined || next.startsWith("--")) flags.set(arg.slice(2), "true")
    else flags.set(arg.slice(2), (i++, next))
  }
  return flags
}
