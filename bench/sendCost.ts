/**
 * What sending one media frame costs the sender, over a real loopback WebSocket: the bare relay's
 * way (`ws.send` of a string), a Latin-1 Buffer through `ws.send`, and callgate's own
 * (`WsWireSocket.sendAscii`: the whole frame, header included, in one Buffer and one socket
 * write). A server socket sends N Twilio media frames built by concatenation, as callgate builds
 * them, to a client in another process that reads and drops them; the sender's CPU time (user +
 * system, `process.cpuUsage`) per frame is reported, each way measured in alternating rounds.
 *
 *   npx tsx bench/sendCost.ts [--frames 200000] [--rounds 3]
 */
import { spawn } from "node:child_process"
import { createRequire } from "node:module"
import type { AddressInfo } from "node:net"
import { parseArgs } from "node:util"
import { type WebSocket, WebSocketServer } from "ws"
import { twilioInboundEncoder } from "../src/frames/TwilioFrames.js"
import { wsWireSocket } from "../src/websocket/WsWireSocket.js"

const { values: args } = parseArgs({ options: { frames: { type: "string", default: "200000" }, rounds: { type: "string", default: "3" } } })
const FRAMES = Number(args.frames)
const ROUNDS = Number(args.rounds)
const BATCH = 100
const payload = Buffer.alloc(160, 0x55).toString("base64")
const encoder = twilioInboundEncoder("MZ0123456789abcdef0123456789abcdef")
const TEXT = { binary: false } as const

type Way = "ws.send(string), as the bare relay" | "ws.send(Latin-1 Buffer)" | "WsWireSocket.sendAscii (callgate)"
const ways: ReadonlyArray<Way> = ["ws.send(string), as the bare relay", "ws.send(Latin-1 Buffer)", "WsWireSocket.sendAscii (callgate)"]

const server = new WebSocketServer({ host: "127.0.0.1", port: 0 })
await new Promise((resolve) => server.once("listening", resolve))
const port = (server.address() as AddressInfo).port
const connected = new Promise<WebSocket>((resolve) => server.once("connection", resolve))
const reader = spawn(
  process.execPath,
  ["-e", `const W=require(${JSON.stringify(createRequire(import.meta.url).resolve("ws"))});const c=new W("ws://127.0.0.1:${port}");c.on("message",()=>{});c.on("close",()=>process.exit(0))`],
  { stdio: "inherit" }
)
const ws = await connected
const wire = wsWireSocket(ws)

/** Sends FRAMES frames one way, in batches that let the socket drain; the sender's CPU microseconds per frame. */
const round = (way: Way) =>
  new Promise<number>((resolve) => {
    let sent = 0
    const started = process.cpuUsage()
    const batch = () => {
      for (let i = 0; i < BATCH && sent < FRAMES; i++, sent++) {
        const frame = encoder.media(sent, sent, sent * 20, payload)
        if (way === "ws.send(string), as the bare relay") ws.send(frame)
        else if (way === "ws.send(Latin-1 Buffer)") ws.send(Buffer.from(frame, "latin1"), TEXT)
        else wire.sendAscii(frame)
      }
      if (sent < FRAMES) return void setImmediate(batch)
      const used = process.cpuUsage(started)
      resolve((used.user + used.system) / FRAMES)
    }
    batch()
  })

const results = new Map<Way, Array<number>>(ways.map((way) => [way, []]))
for (let r = 0; r < ROUNDS; r++) for (const way of ways) results.get(way)!.push(await round(way))
for (const [way, perFrame] of results) {
  const best = Math.min(...perFrame)
  process.stdout.write(`${way}: ${best.toFixed(2)} us CPU per frame (best of ${ROUNDS}; all: ${perFrame.map((v) => v.toFixed(2)).join(", ")})\n`)
}
ws.close()
reader.once("exit", () => server.close(() => process.exit(0)))
