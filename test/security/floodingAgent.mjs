// A dial-in agent in its own process that floods its call with media as fast as it can, until
// callgate closes the socket. Prints one JSON line: how many messages it sent and the close.
// Usage: node floodingAgent.mjs <ws url> <api key>
import { WebSocket } from "ws"

const [url, key] = process.argv.slice(2)
const ws = new WebSocket(url, { headers: { authorization: `Bearer ${key}` } })
let sent = 0
ws.on("open", () => console.log(JSON.stringify({ open: true })))
ws.on("message", (data) => {
  const message = JSON.parse(data.toString())
  if (message.event !== "start") return
  const frame = JSON.stringify({ event: "media", streamSid: message.start.streamSid, media: { payload: Buffer.alloc(160, 0xff).toString("base64") } })
  const flood = () => {
    for (let i = 0; i < 200 && ws.readyState === WebSocket.OPEN; i++) {
      ws.send(frame)
      sent++
    }
    if (ws.readyState === WebSocket.OPEN) setImmediate(flood)
  }
  flood()
})
ws.on("close", (code, reason) => {
  console.log(JSON.stringify({ sent, code, reason: reason.toString() }))
  process.exit(0)
})
ws.on("error", () => {})
