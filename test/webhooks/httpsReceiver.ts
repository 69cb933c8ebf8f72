import { readFileSync } from "node:fs"
import { createServer, type Server } from "node:https"
import type { IncomingHttpHeaders, ServerResponse } from "node:http"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const tlsDir = fileURLToPath(new URL("../fixtures/tls/", import.meta.url))
export const CA_FILE = join(tlsDir, "ca.pem")
export const TEST_CA = readFileSync(CA_FILE)
export const TLS_KEY = readFileSync(join(tlsDir, "server-key.pem"))
export const TLS_CERT = readFileSync(join(tlsDir, "server.pem"))
const key = TLS_KEY
const cert = TLS_CERT

export interface ReceivedRequest {
  readonly method: string
  readonly path: string
  readonly headers: IncomingHttpHeaders
  readonly body: Buffer
  readonly receivedAt: number
  /** Which connection it came on (counts keep-alive reuse). */
  readonly connection: number
}

/** What to answer: a status (with optional headers, body, delay), or "hang" (never answer). */
export type Reply =
  | { readonly status: number; readonly headers?: Record<string, string>; readonly body?: string | Buffer; readonly delayMs?: number }
  | "hang"

export interface Receiver {
  readonly port: number
  readonly url: (path?: string) => string
  readonly requests: Array<ReceivedRequest>
  /** Requests currently being answered. */
  readonly inFlight: () => number
  readonly maxInFlight: () => number
  readonly connections: () => number
  /** Resolves once `count` requests have arrived. */
  readonly waitFor: (count: number, timeoutMs?: number) => Promise<void>
  readonly close: () => Promise<void>
}

/**
 * A real HTTPS server on loopback with the test CA's certificate (valid for localhost, 127.0.0.1,
 * ::1 and receiver.test). `reply` decides each answer; it may be async (to act between attempts).
 */
export const startReceiver = async (
  reply: (request: ReceivedRequest, index: number) => Reply | Promise<Reply> = () => ({ status: 200 }),
  host = "127.0.0.1"
): Promise<Receiver> => {
  const requests: Array<ReceivedRequest> = []
  const waiters: Array<{ count: number; resolve: () => void }> = []
  const open = new Set<ServerResponse>()
  let inFlight = 0
  let maxInFlight = 0
  let connections = 0
  const server: Server = createServer({ key, cert, keepAliveTimeout: 5000 }, (req, res) => {
    inFlight++
    maxInFlight = Math.max(maxInFlight, inFlight)
    open.add(res)
    res.on("close", () => {
      open.delete(res)
      inFlight--
    })
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", async () => {
      const request: ReceivedRequest = {
        method: req.method ?? "",
        path: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks),
        receivedAt: performance.now(),
        connection: (req.socket as unknown as { connectionNumber: number }).connectionNumber
      }
      const index = requests.length
      requests.push(request)
      for (const waiter of waiters.splice(0)) {
        if (requests.length >= waiter.count) waiter.resolve()
        else waiters.push(waiter)
      }
      const answer = await reply(request, index)
      if (answer === "hang") return
      const send = () => {
        if (res.destroyed) return
        res.writeHead(answer.status, answer.headers)
        res.end(answer.body)
      }
      if (answer.delayMs) setTimeout(send, answer.delayMs)
      else send()
    })
  })
  server.on("secureConnection", (socket) => {
    ;(socket as unknown as { connectionNumber: number }).connectionNumber = ++connections
  })
  await new Promise<void>((resolve) => server.listen(0, host, resolve))
  const port = (server.address() as { port: number }).port
  const hostInUrl = host.includes(":") ? `[${host}]` : host
  return {
    port,
    url: (path = "/hook") => `https://${hostInUrl}:${port}${path}`,
    requests,
    inFlight: () => inFlight,
    maxInFlight: () => maxInFlight,
    connections: () => connections,
    waitFor: (count, timeoutMs = 10_000) =>
      new Promise<void>((resolve, reject) => {
        if (requests.length >= count) return resolve()
        const timer = setTimeout(() => reject(new Error(`only ${requests.length} of ${count} requests arrived`)), timeoutMs)
        waiters.push({
          count,
          resolve: () => {
            clearTimeout(timer)
            resolve()
          }
        })
      }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of open) res.destroy()
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

/** Polls `check` until it returns a value (not undefined) or the time is up. */
export const eventually = async <A>(check: () => A | undefined | Promise<A | undefined>, timeoutMs = 10_000): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error("condition not met in time")
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}
