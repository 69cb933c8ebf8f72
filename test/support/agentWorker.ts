/**
 * A dial-in agent worker as a process of its own (test/livecall/agentFailover.test.ts kills it):
 * `node --import tsx test/support/agentWorker.ts <connect URL> <API key> [checkpoint JSON|-] [capacity]`
 * opens `capacity` sockets (default 1) to callgate's /connect endpoint and prints every message
 * each one receives, one JSON line each with `_socket` (its index) added, on stdout; it prints
 * {"event":"open"} once a socket is open. Given a checkpoint, each socket sends it once its call
 * starts. A socket is not reopened after its call. It knows nothing of `resume` (it only prints
 * it), like a Twilio-stream bot.
 */
import { WebSocket } from "ws"

const [url, key, checkpoint, capacity] = process.argv.slice(2)
const print = (socket: number, message: object) => process.stdout.write(`${JSON.stringify({ ...message, _socket: socket })}\n`)
let open = Number(capacity ?? "1")

for (let index = 0; index < Number(capacity ?? "1"); index++) {
  const socket = new WebSocket(url!, { headers: { authorization: `Bearer ${key}` } })
  socket.on("open", () => print(index, { event: "open" }))
  socket.on("message", (data) => {
    const message = JSON.parse(data.toString())
    print(index, message)
    if (checkpoint !== undefined && checkpoint !== "-" && message.event === "start") {
      socket.send(JSON.stringify({ event: "checkpoint", checkpoint: JSON.parse(checkpoint) }))
    }
  })
  socket.on("close", (code) => {
    print(index, { event: "closed", code })
    if (--open === 0) process.exit(0)
  })
  socket.on("error", (error) => {
    process.stderr.write(`${error.message}\n`)
    process.exit(1)
  })
}
