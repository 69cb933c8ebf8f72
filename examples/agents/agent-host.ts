/**
 * How example agents reach callgate: a dial-in pool that keeps N sockets open to the /connect
 * endpoint (one socket = capacity for one call, reopened after each call), or a dial-out server
 * for environments with an `agentUrl` (callgate connects per call). See docs/calls.md, "Agents".
 */
import { EventEmitter } from "node:events"
import { readFileSync } from "node:fs"
import { createServer as createHttpServer, type Server } from "node:http"
import { createServer as createHttpsServer } from "node:https"
import type { AddressInfo } from "node:net"
import { resolve } from "node:path"
import { pathToFileURL } from "node:url"
import { type ClientOptions, WebSocket, WebSocketServer } from "ws"
import { AgentCall } from "./agent-runtime.js"

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
  /** Wait before reopening a socket after a call; doubled (up to 5 s) after failed attempts. Default 100 ms. */
  readonly reconnectDelayMs?: number
  readonly wsOptions?: ClientOptions
  /** Stamp outgoing frames (FrameStamp) with the call's index as call id. */
  readonly stampFrames?: boolean
}

export interface DialInEvents {
  /** A socket is open and waiting for a call. */
  ready: [number]
  /** A socket could not be opened (refused upgrade, connection error); it is retried. */
  connectError: [string]
  call: [AgentCall]
}

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
    socket.on("error", (error) => {
      if (!opened) this.emit("connectError", error.message)
    })
    socket.once("close", () => {
      this.sockets.delete(socket)
      if (opened && !carried) this.idle--
      if (this.stopped) return
      const nextFailures = opened ? 0 : failures + 1
      const delay = Math.min(5000, (this.options.reconnectDelayMs ?? 100) * 2 ** Math.min(nextFailures, 6))
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
      stampFrames: options.stampFrames ?? false
    })
    this.pool.on("call", onCall)
    this.pool.on("connectError", (message) => (this as EventEmitter).emit("connectError", message))
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
    apiKey: flags.get("key") ?? process.env.CALLGATE_API_KEY,
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
