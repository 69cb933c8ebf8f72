import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"

/** One request a fake provider received, as the tests assert on it. */
export interface RecordedRequest {
  readonly method: string
  /** The path without the query, as sent (percent-encoding kept). */
  readonly path: string
  readonly query: Record<string, string>
  readonly headers: IncomingHttpHeaders
  readonly rawBody: string
  /** Set for application/x-www-form-urlencoded bodies. */
  readonly form: Record<string, string> | undefined
  /** Set for JSON bodies. */
  readonly json: unknown
  /** `Date.now()` when the whole request had arrived. */
  readonly receivedAt: number
}

export interface Answer {
  readonly status: number
  readonly body?: unknown
}

/**
 * What the next request gets instead of the normal answer: an HTTP answer, a dropped connection
 * (the socket is destroyed without a response), or the normal answer after a delay.
 */
export type Override = Answer | { readonly drop: true } | { readonly delayMs: number }

export interface RecordingServer {
  /** http://127.0.0.1:<port> */
  readonly origin: string
  readonly requests: ReadonlyArray<RecordedRequest>
  /** The next `times` requests get `override`, in the order enqueued. */
  readonly override: (override: Override, times?: number) => void
  /** Resolves once `predicate` holds for the recorded requests (polling), or rejects after `timeoutMs`. */
  readonly waitFor: (predicate: (requests: ReadonlyArray<RecordedRequest>) => boolean, timeoutMs?: number) => Promise<ReadonlyArray<RecordedRequest>>
  readonly reset: () => void
  readonly close: () => Promise<void>
}

const parseBody = (contentType: string | undefined, raw: string) => {
  if (contentType?.includes("application/x-www-form-urlencoded")) return { form: Object.fromEntries(new URLSearchParams(raw)), json: undefined }
  if (contentType?.includes("json") && raw.length > 0) {
    try {
      return { form: undefined, json: JSON.parse(raw) as unknown }
    } catch {
      return { form: undefined, json: undefined }
    }
  }
  return { form: undefined, json: undefined }
}

const send = (response: ServerResponse, answer: Answer) => {
  const body = answer.body === undefined ? "" : typeof answer.body === "string" ? answer.body : JSON.stringify(answer.body)
  response.writeHead(answer.status, {
    "content-type": typeof answer.body === "string" ? "text/plain" : "application/json",
    "content-length": Buffer.byteLength(body)
  })
  response.end(body)
}

/**
 * A plain node:http server on 127.0.0.1:0 that records every request before answering it with
 * `respond` (the provider's normal behaviour) or with an enqueued override.
 */
export const startRecordingServer = async (respond: (request: RecordedRequest) => Answer): Promise<RecordingServer> => {
  const requests: Array<RecordedRequest> = []
  const overrides: Array<Override> = []
  const sockets = new Set<Socket>()
  const server: Server = createServer((request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const rawBody = Buffer.concat(chunks).toString("utf8")
      const url = new URL(request.url ?? "/", "http://fake")
      const recorded: RecordedRequest = {
        method: request.method ?? "",
        path: (request.url ?? "/").split("?")[0]!,
        query: Object.fromEntries(url.searchParams),
        headers: request.headers,
        rawBody,
        ...parseBody(request.headers["content-type"], rawBody),
        receivedAt: Date.now()
      }
      requests.push(recorded)
      const override = overrides.shift()
      if (override !== undefined && "drop" in override) return void request.socket.destroy()
      if (override !== undefined && "delayMs" in override) {
        const timer = setTimeout(() => {
          if (!response.destroyed) send(response, respond(recorded))
        }, override.delayMs)
        response.on("close", () => clearTimeout(timer))
        return
      }
      send(response, override ?? respond(recorded))
    })
  })
  server.on("connection", (socket) => {
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    origin: `http://127.0.0.1:${port}`,
    requests,
    override: (override, times = 1) => {
      for (let i = 0; i < times; i++) overrides.push(override)
    },
    waitFor: async (predicate, timeoutMs = 30_000) => {
      const deadline = Date.now() + timeoutMs
      while (!predicate(requests)) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for requests; got ${requests.length}: ${requests.map((r) => `${r.method} ${r.path}`).join(", ")}`)
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
      return requests
    },
    reset: () => {
      requests.length = 0
      overrides.length = 0
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      })
  }
}
