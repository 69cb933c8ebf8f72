/**
 * The customer's side of callgate, on node:https with the demo certificate: one server playing
 * both webhook roles an environment points at.
 *
 * - `POST /events`: the event webhook. Verifies `session.ended` with `verifySignature` and the
 *   environment's webhookSecret; 200 when it verifies, 401 when not.
 * - `POST /fallback?error=...`: the error fallback webhook. Verifies with the environment's
 *   errorFallbackWebhookSecret; answers TwiML that takes the live call over (docs/fallback.md, "The fallback webhook"), or 401.
 *
 * The secrets exist only once the environment is configured, which needs this server's URL first,
 * so they are handed over afterwards with `useSecrets`.
 */
import { createServer, type Server } from "node:https"
import type { ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"
import { verifySignature } from "../../src/webhooks/Signing.js"
import { readBody } from "../receiver.js"
import { Inbox } from "./steps.js"

export interface ReceivedWebhook {
  readonly role: "event" | "fallback"
  /** Path and query as received, e.g. /fallback?error=The%20agent... */
  readonly url: string
  readonly rawBody: Buffer
  readonly verified: boolean
  /** What this receiver answered. */
  readonly status: number
}

export interface DemoReceiver {
  /** https://127.0.0.1:<port><path> (the certificate is valid for 127.0.0.1, ::1 and localhost). */
  readonly url: (path: string) => string
  readonly received: Inbox<ReceivedWebhook>
  readonly useSecrets: (secrets: { readonly events: string; readonly fallback: string }) => void
  readonly close: () => Promise<void>
}


export const startDemoReceiver = async (options: {
  readonly key: Buffer
  readonly cert: Buffer
  /** What the fallback webhook answers: a TwiML document with a <Response> root. */
  readonly fallbackTwiml: string
}): Promise<DemoReceiver> => {
  const received = new Inbox<ReceivedWebhook>()
  let secrets: { readonly events: string; readonly fallback: string } | undefined
  const sockets = new Set<Socket>()

  const answer = (response: ServerResponse, status: number, contentType: string, body: string) => {
    response.writeHead(status, { "content-type": contentType })
    response.end(body)
  }

  const server: Server = createServer({ key: options.key, cert: options.cert }, async (request, response) => {
    const url = request.url ?? "/"
    const path = url.split("?")[0]
    const role = path === "/events" ? "event" : path === "/fallback" ? "fallback" : undefined
    if (request.method !== "POST" || role === undefined) return answer(response, 404, "text/plain", "not found")
    const rawBody = await readBody(request).catch(() => undefined)
    if (rawBody === undefined) return answer(response, 413, "text/plain", "body too large")
    const secret = role === "event" ? secrets?.events : secrets?.fallback
    const verified =
      secret !== undefined &&
      verifySignature({
        secret,
        signature: request.headers["x-service-signature"],
        timestamp: request.headers["x-service-timestamp"],
        rawBody
      })
    const status = verified ? 200 : 401
    if (!verified) answer(response, 401, "application/json", JSON.stringify({ error: "invalid signature" }))
    else if (role === "fallback") answer(response, 200, "text/xml", options.fallbackTwiml)
    else answer(response, 200, "application/json", JSON.stringify({ received: true }))
    received.push({ role, url, rawBody, verified, status })
  })
  server.on("connection", (socket: Socket) => {
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
  })
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(0, "127.0.0.1", resolve)
  })
  const { port } = server.address() as AddressInfo
  return {
    url: (path) => `https://127.0.0.1:${port}${path}`,
    received,
    useSecrets: (given) => void (secrets = given),
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      })
  }
}
