/**
 * A reference receiver for callgate's `session.ended` webhooks, on node:https with no framework.
 *
 * - Reads the raw body (the signature covers the exact bytes), checks X-Service-Signature and
 *   X-Service-Timestamp with `verifySignature`, and answers 401 when they do not verify.
 * - Deduplicates on `sessionId`: delivery is at-least-once, so the same event can arrive again
 *   (a retry after a timeout, or after callgate restarted mid-attempt). A repeat is acknowledged
 *   with 200 and not processed twice.
 * - Answers quickly (callgate waits 10 s) and does the work afterwards.
 *
 * In your own project import from the package: `import { verifySignature } from "@callgate/webhooks"` (packages/webhooks, docs/webhooks.md).
 *
 *   CALLGATE_WEBHOOK_SECRET=whsec_... TLS_KEY=key.pem TLS_CERT=cert.pem PORT=8443 npx tsx examples/receiver.ts
 */
import { readFileSync } from "node:fs"
import { createServer, type Server } from "node:https"
import type { IncomingMessage, ServerResponse } from "node:http"
import { pathToFileURL } from "node:url"
import { type SessionEndedEvent, verifySignature } from "../src/webhooks/index.js"

export interface ReceiverOptions {
  /** The environment's webhookSecret, as shown when it was generated. */
  readonly secret: string
  readonly key: string | Buffer
  readonly cert: string | Buffer
  /** Called once per session, after the request was acknowledged. */
  readonly onEvent: (event: SessionEndedEvent) => void | Promise<void>
  /** How many recent session ids to remember for deduplication. Default 100,000. */
  readonly rememberSessions?: number
}

/** Largest body accepted; a session.ended payload is well under 2 KiB. */
export const MAX_BODY_BYTES = 64 * 1024

/** The body, or undefined when it is larger than MAX_BODY_BYTES (read to the end and dropped). */
export const readBody = (request: IncomingMessage) =>
  new Promise<Buffer | undefined>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    let size = 0
    request.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size <= MAX_BODY_BYTES) chunks.push(chunk)
    })
    request.on("end", () => resolve(size <= MAX_BODY_BYTES ? Buffer.concat(chunks) : undefined))
    request.on("error", reject)
  })

/** Remembers the most recent `capacity` ids (a Map iterates in insertion order, oldest first). */
const recentIds = (capacity: number) => {
  const seen = new Map<string, true>()
  return {
    /** True the first time an id is seen. */
    firstTime: (id: string) => {
      if (seen.has(id)) return false
      seen.set(id, true)
      if (seen.size > capacity) seen.delete(seen.keys().next().value!)
      return true
    }
  }
}

const isSessionEnded = (value: unknown): value is SessionEndedEvent =>
  typeof value === "object" &&
  value !== null &&
  (value as { event?: unknown }).event === "session.ended" &&
  typeof (value as { sessionId?: unknown }).sessionId === "string"

const reply = (response: ServerResponse, status: number, body: object) => {
  response.writeHead(status, { "content-type": "application/json" })
  response.end(JSON.stringify(body))
}

export const createReceiver = (options: ReceiverOptions): Server => {
  const sessions = recentIds(options.rememberSessions ?? 100_000)
  return createServer({ key: options.key, cert: options.cert }, async (request, response) => {
    if (request.method !== "POST") return reply(response, 405, { error: "POST only" })
    const rawBody = await readBody(request).catch(() => undefined)
    if (rawBody === undefined) return reply(response, 413, { error: "body too large" })

    const verified = verifySignature({
      secret: options.secret,
      signature: request.headers["x-service-signature"],
      timestamp: request.headers["x-service-timestamp"],
      rawBody
    })
    if (!verified) return reply(response, 401, { error: "invalid signature" })

    let event: unknown
    try {
      event = JSON.parse(rawBody.toString("utf8"))
    } catch {
      return reply(response, 400, { error: "body is not JSON" })
    }
    // An unknown event kind is acknowledged, so callgate does not retry it.
    if (!isSessionEnded(event)) return reply(response, 200, { ignored: true })

    if (!sessions.firstTime(event.sessionId)) return reply(response, 200, { duplicate: true })
    reply(response, 200, { received: true })
    try {
      await options.onEvent(event)
    } catch (error) {
      console.error("processing session.ended failed", event.sessionId, error)
    }
  })
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const secret = process.env.CALLGATE_WEBHOOK_SECRET
  if (!secret || !process.env.TLS_KEY || !process.env.TLS_CERT) {
    console.error("set CALLGATE_WEBHOOK_SECRET, TLS_KEY and TLS_CERT (PEM file paths)")
    process.exit(1)
  }
  const port = Number(process.env.PORT ?? 8443)
  createReceiver({
    secret,
    key: readFileSync(process.env.TLS_KEY),
    cert: readFileSync(process.env.TLS_CERT),
    onEvent: (event) => console.log(`session ${event.sessionId} ended: ${event.status}`, event)
  }).listen(port, () => console.log(`receiving callgate webhooks on https://0.0.0.0:${port}/`))
}
