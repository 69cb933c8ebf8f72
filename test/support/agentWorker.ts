/**
 * A dial-in agent worker as a process of its own (test/livecall/agentFailover.test.ts kills it):
 * `node --import tsx test/support/agentWorker.ts <connect URL> <API key>` opens one socket to
 * callgate's /connect endpoint and prints every message it receives, one JSON line each, on
 * stdout; it prints {"event":"open"} once the socket is open. It knows nothing of `resume` (it
 * only prints it), like a Twilio-stream bot.
 */
import { WebSocket } from "ws"

const [url, key] = process.argv.slice(2)
const socket = new WebSocket(url!, { headers: { authorization: `Bearer ${key}` } })
socket.on("open", () => process.stdout.write(`${JSON.stringify({ event: "open" })}\n`))
socket.on("message", (data) => process.stdout.write(`${data.toString()}\n`))
socket.on("close", (code) => {
  process.stdout.write(`${JSON.stringify({ event: "closed", code })}\n`)
  process.exit(0)
})
socket.on("error", (error) => {
  process.stderr.write(`${error.message}\n`)
  process.exit(1)
})
