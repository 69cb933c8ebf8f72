import { createServer, type IncomingHttpHeaders, type IncomingMessage } from "node:http"
import type { AddressInfo } from "node:net"
import { WebSocket, WebSocketServer } from "ws"

/**
 * A minimal stand-in for callgate's carrier side, for testing the simulator on its own: the Twilio
 * voice webhook and Telnyx TeXML endpoint answer `<Connect><Stream>`, and stream sockets record
 * every frame. Tests drive the gateway's half of the stream by hand (media, mark, clear).
 */
export interface RecordedWebhook {
  readonly path: string
  readonly query: URLSearchParams
  readonly form: Record<string, string>
  readonly rawBody: string
  readonly headers: IncomingHttpHeaders
  /** The URL as a carrier signs it: this server's origin + path + query. */
  readonly url: string
}

export class FakeStream {
  readonly messages: Array<any> = []
  readonly raw: Array<string> = []
  private readonly waiters = new Set<() => void>()
  closed: { code: number; reason: string } | undefined

  constructor(
    readonly socket: WebSocket,
    readonly request: IncomingMessage
  ) {
    socket.on("message", (data) => {
      const text = data.toString()
      this.raw.push(text)
      this.messages.push(JSON.parse(text))
      for (const wake of [...this.waiters]) wake()
    })
    socket.on("close", (code, reason) => {
      this.closed = { code, reason: reason.toString() }
      for (const wake of [...this.waiters]) wake()
    })
  }

  events(name: string) {
    return this.messages.filter((message) => message.event === name)
  }

  /** Resolves once `predicate` holds (checked on every frame and on close). */
  until<T>(predicate: () => T | undefined | false, timeoutMs = 30_000, what = "condition"): Promise<T> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const value = predicate()
        if (value !== undefined && value !== false) {
          clearTimeout(timer)
          this.waiters.delete(check)
          resolve(value)
        }
      }
      const timer = setTimeout(() => {
        this.waiters.delete(check)
        reject(new Error(`timed out waiting for ${what}; got ${this.messages.map((m) => m.event).join(",")}`))
      }, timeoutMs)
      this.waiters.add(check)
      check()
    })
  }

  /** Resolves with the n-th (1-based) frame of `event`. */
  nth(event: string, n = 1, timeoutMs = 30_000) {
    return this.until(() => this.events(event)[n - 1], timeoutMs, `${event} #${n}`)
  }

  /** Twilio-style outbound frames (the Telnyx tests pass `streamField: undefined`). */
  sendMedia(audio: Buffer, streamField: Record<string, string> = this.streamField()) {
    this.socket.send(JSON.stringify({ event: "media", ...streamField, media: { payload: audio.toString("base64") } }))
  }

  sendMark(name: string, streamField: Record<string, string> = this.streamField()) {
    this.socket.send(JSON.stringify({ event: "mark", ...streamField, mark: { name } }))
  }

  sendClear(streamField: Record<string, string> = this.streamField()) {
    this.socket.send(JSON.stringify({ event: "clear", ...streamField }))
  }

  private streamField(): Record<string, string> {
    const start = this.events("start")[0]
    if (start?.streamSid) return { streamSid: start.streamSid }
    if (start?.stream_id) return { stream_id: start.stream_id }
    return {}
  }
}

export interface FakeGatewayOptions {
  /** Answers the webhook; default: `<Connect><Stream>` to this server's stream path for the provider. */
  readonly answer?: (hook: RecordedWebhook, origin: string) => { status: number; body: string }
  /**
   * Refuses an upgrade by answering this status (e.g. a bad signature), with callgate's JSON error
   * envelope when a body is given.
   */
  readonly refuseUpgrade?: (request: IncomingMessage) => number | { readonly status: number; readonly body: string } | undefined
}

export const defaultAnswer = (hook: RecordedWebhook, origin: string) => {
  const ws = origin.replace(/^http/, "ws")
  if (hook.path === "/telephony/twilio/voice") {
    return {
      status: 200,
      body:
        `<?xml version="1.0" encoding="UTF-8"?><Response><Connect><Stream url="${ws}/telephony/twilio/stream">` +
        `<Parameter name="token" value="tok.en&amp;1"/><Parameter name="agentId" value="${hook.query.get("agentId")}"/>` +
        `<Parameter name="from" value="${hook.form.From}"/></Stream></Connect></Response>`
    }
  }
  return {
    status: 200,
    body:
      `<?xml version="1.0" encoding="UTF-8"?><Response><Connect><Stream url="${ws}/telephony/telnyx/stream?token=abc.def" ` +
      `bidirectionalMode="rtp" bidirectionalCodec="PCMU"/></Connect></Response>`
  }
}

export const startFakeGateway = async (options: FakeGatewayOptions = {}) => {
  const webhooks: Array<RecordedWebhook> = []
  const streams: Array<FakeStream> = []
  const upgrades: Array<IncomingMessage> = []
  const streamWaiters = new Set<() => void>()
  let origin = ""
  const server = createServer((request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const url = new URL(request.url ?? "/", origin)
      const rawBody = Buffer.concat(chunks).toString("utf8")
      const hook: RecordedWebhook = {
        path: url.pathname,
        query: url.searchParams,
        form: Object.fromEntries(new URLSearchParams(rawBody)),
        rawBody,
        headers: request.headers,
        url: url.toString()
      }
      webhooks.push(hook)
      const answer = (options.answer ?? defaultAnswer)(hook, origin)
      response.writeHead(answer.status, { "content-type": "text/xml" }).end(answer.body)
    })
  })
  const wss = new WebSocketServer({ noServer: true })
  server.on("upgrade", (request, socket, head) => {
    upgrades.push(request)
    // A client that gives up (or is killed) mid-handshake resets the connection: not this server's failure.
    socket.on("error", () => {})
    const refusal = options.refuseUpgrade?.(request)
    if (refusal !== undefined) {
      const { status, body } = typeof refusal === "number" ? { status: refusal, body: "" } : refusal
      socket.end(`HTTP/1.1 ${status} Refused\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
      return
    }
    wss.handleUpgrade(request, socket, head, (ws) => {
      const stream = new FakeStream(ws, request)
      streams.push(stream)
      for (const wake of [...streamWaiters]) wake()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return {
    url: origin,
    webhooks,
    streams,
    /** Every upgrade request, refused or not. */
    upgrades,
    /** The `index`-th stream (0-based) to connect, once it has. */
    stream: (index = 0): Promise<FakeStream> =>
      new Promise((resolve) => {
        const check = () => {
          const stream = streams[index]
          if (stream === undefined) return
          streamWaiters.delete(check)
          resolve(stream)
        }
        streamWaiters.add(check)
        check()
      }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const client of wss.clients) client.terminate()
        wss.close()
        server.close(() => resolve())
      })
  }
}

export type FakeGateway = Awaited<ReturnType<typeof startFakeGateway>>
