/**
 * What receiving one media frame costs, over a real loopback WebSocket: the bare relay's way (`ws`
 * reads the socket through its Receiver, and the `message` listener decodes the Buffer) against
 * callgate's (`WsWireSocket`, whose FrameReader reads whole text frames itself). A client in
 * another process sends N masked Twilio media frames, one at a time: each waits for a 2-byte
 * answer, which the server writes straight to its socket (the same bytes and call either way), so
 * every frame arrives in a read of its own, as at real cadence. The server's CPU time (user +
 * system, `process.cpuUsage`) per frame is reported, the ways measured in alternating rounds;
 * the difference between them is the receiving alone.
 *
 *   npx tsx bench/receiveCost.ts [--frames 100000] [--rounds 3]
 */
import { spawn } from "node:child_process"
import { createRequire } from "node:module"
import type { AddressInfo } from "node:net"
import type { Duplex } from "node:stream"
import { parseArgs } from "node:util"
import { type WebSocket, WebSocketServer } from "ws"
import { twilioInboundEncoder } from "../src/wire/TwilioFrames.js"
import { wsWireSocket } from "../src/ws/WsWireSocket.js"

const { values: args } = parseArgs({ options: { frames: { type: "string", default: "100000" }, rounds: { type: "string", default: "3" } } })
const FRAMES = Number(args.frames)
const ROUNDS = Number(args.rounds)
const frame = twilioInboundEncoder("MZ0123456789abcdef0123456789abcdef").media(1, 1, 20, Buffer.alloc(160, 0x55).toString("base64"))
/** The answer: an empty text frame, written to the socket as is. */
const ANSWER = Buffer.from([0x81, 0x00])

type Way = "ws 'message' + toString, as the bare relay" | "WsWireSocket (callgate)"
const ways: ReadonlyArray<Way> = ["ws 'message' + toString, as the bare relay", "WsWireSocket (callgate)"]

const server = new WebSocketServer({ host: "127.0.0.1", port: 0, maxPayload: 64 * 1024 })
await new Promise((resolve) => server.once("listening", resolve))
const port = (server.address() as AddressInfo).port

/** The client: connects, sends FRAMES frames each after the previous one's answer, closes. */
const client = `
const W = require(${JSON.stringify(createRequire(import.meta.url).resolve("ws"))})
const frame = ${JSON.stringify(frame)}
const c = new W("ws://127.0.0.1:${port}")
let sent = 0
c.on("open", () => { sent++; c.send(frame) })
c.on("message", () => { if (sent < ${FRAMES}) { sent++; c.send(frame) } else c.close() })
c.on("close", () => process.exit(0))
`

const round = (way: Way) =>
  new Promise<number>((resolve) => {
    server.once("connection", (ws: WebSocket) => {
      const socket = (ws as unknown as { _socket: Duplex })._socket
      let received = 0
      const started = process.cpuUsage()
      const answer = (text: string) => {
        if (text.length > 0) received++
        socket.write(ANSWER)
      }
      if (way === "WsWireSocket (callgate)") {
        wsWireSocket(ws, { onText: answer, onClose: () => {} })
      } else {
        ws.on("message", (data, isBinary) => answer(isBinary ? "" : data.toString()))
      }
      ws.once("close", () => {
        const used = process.cpuUsage(started)
        if (received !== FRAMES) throw new Error(`${way}: ${received} of ${FRAMES} frames arrived`)
        resolve((used.user + used.system) / FRAMES)
      })
    })
    spawn(process.execPath, ["-e", client], { stdio: "inherit" })
  })

const results = new Map<Way, Array<number>>(ways.map((way) => [way, []]))
for (let r = 0; r < ROUNDS; r++) for (const way of ways) results.get(way)!.push(await round(way))
for (const [way, perFrame] of results) {
  const best = Math.min(...perFrame)
  process.stdout.write(`${way}: ${best.toFixed(2)} us CPU per frame (best of ${ROUNDS}; all: ${perFrame.map((v) => v.toFixed(2)).join(", ")})\n`)
}
server.close(() => process.exit(0))
