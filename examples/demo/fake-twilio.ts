/**
 * A Twilio-compatible REST server on loopback, for TWILIO_API_BASE_URL: callgate's twilio SDK
 * sends its call updates here instead of to api.twilio.com. It answers the one request callgate
 * makes, `POST /2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json` (form-encoded `Twiml`,
 * `Status` or `Url`, HTTP Basic auth with the account SID and auth token), like Twilio does, and
 * records each update: that is where the error fallback's TwiML lands.
 */
import { createServer, type ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"
import { Inbox } from "./steps.js"

export interface CallUpdate {
  readonly callSid: string
  /** The form fields: `Twiml`, `Status` or `Url`. */
  readonly form: Readonly<Record<string, string>>
}

export interface FakeTwilio {
  readonly baseUrl: string
  readonly updates: Inbox<CallUpdate>
  /** Requests refused (wrong credentials, unknown path), as one line each. */
  readonly refused: Array<string>
  readonly close: () => Promise<void>
}

const CALL_PATH = /^\/2010-04-01\/Accounts\/([^/]+)\/Calls\/([^/]+)\.json$/
const MAX_BODY_BYTES = 64 * 1024

const reply = (response: ServerResponse, status: number, body: object) => {
  response.writeHead(status, { "content-type": "application/json" })
  response.end(JSON.stringify(body))
}

/** Twilio's error body: code, message, more_info, status. */
const twilioError = (response: ServerResponse, status: number, code: number, message: string) =>
  reply(response, status, { code, message, more_info: `https://www.twilio.com/docs/errors/${code}`, status })

export const startFakeTwilio = async (accountSid: string, authToken: string): Promise<FakeTwilio> => {
  const expectedAuth = `Basic ${Buffer.from(`${accountSid}:${authToken}`).toString("base64")}`
  const updates = new Inbox<CallUpdate>()
  const refused: Array<string> = []
  const sockets = new Set<Socket>()

  const server = createServer((request, response) => {
    const chunks: Array<Buffer> = []
    let size = 0
    request.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size <= MAX_BODY_BYTES) chunks.push(chunk)
    })
    request.on("end", () => {
      const path = (request.url ?? "/").split("?")[0]!
      const match = CALL_PATH.exec(path)
      if (request.headers.authorization !== expectedAuth) {
        refused.push(`${request.method} ${path}: wrong credentials`)
        return twilioError(response, 401, 20003, "Authenticate")
      }
      if (request.method !== "POST" || match === null || match[1] !== accountSid) {
        refused.push(`${request.method} ${path}: not a call update`)
        return twilioError(response, 404, 20404, `The requested resource ${path} was not found`)
      }
      if (size > MAX_BODY_BYTES) return twilioError(response, 413, 20001, "Request body too large")
      const form = Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString("utf8")))
      if (form.Twiml === undefined && form.Status === undefined && form.Url === undefined) {
        return twilioError(response, 400, 21201, "No 'Url', 'Twiml' or 'Status' parameter provided")
      }
      const callSid = match[2]!
      updates.push({ callSid, form })
      reply(response, 200, {
        sid: callSid,
        account_sid: accountSid,
        status: form.Status ?? "in-progress",
        api_version: "2010-04-01",
        date_updated: new Date().toUTCString(),
        uri: path
      })
    })
  })
  server.on("connection", (socket) => {
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
  })
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(0, "127.0.0.1", resolve)
  })
  const { port } = server.address() as AddressInfo
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    updates,
    refused,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      })
  }
}
