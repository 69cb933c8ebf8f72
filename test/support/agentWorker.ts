/**
 * A dial-in agent worker as a process of its own (test/livecall/agentFailover.test.ts kills it):
 * `node --import tsx test/support/agentWorker.ts <connect URL> <API key> [checkpoint JSON]` opens
 * one socket to callgate's /connect endpoint and prints every message it receives, one JSON line
 * each, on stdout; it prints {"event":"open"} once the socket is open. Given a checkpoint, it sends
 * it once its call starts (and prints {"event":"checkpointed"}). It knows nothing of `resume` (it
 * only prints it), like a Twilio-stream bot.
 */
import { WebSocket } from "ws"

const [url, key, checkpoint] = process.argv.slice(2)
const socket = new WebSocket(url!, { headers: { authorization: `Bearer ${key}` } })
socket.on("open", () => process.stdout.write(`${JSON.stringify({ event: "open" })}\n`))
socket.on("message", (data) => {
  const text = data.toString()
  process.stdout.write(`${text}\n`)
  if (checkpoint !== undefined && JSON.parse(text).event === "start") {
    socket.send(JSON.stringify({ event: "checkpoint", checkpoint: JSON.parse(checkpoint) }))
    process.stdout.write(`${JSON.stringify({ event: "checkpointed" })}\n`)
  }
})
socket.on("close", (code) => {
  process.stdout.write(`${JSON.stringify({ event: "closed", code })}\n`)
  process.exit(0)
})
socket.on("error", (error) => {
  process.stderr.write(`${error.message}\n`)
  process.exit(1)
})
