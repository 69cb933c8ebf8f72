/**
 * What receiving one media frame costs, from the read's Buffer to the listener's text: the bare
 * relay's way (`ws` reads the socket through its Receiver stream, and the `message` listener
 * decodes the Buffer) against callgate's (`WsWireSocket`, whose WsFrameReader reads whole text
 * frames itself). Each way gets a server-side `ws` socket set up as WebSocketServer sets up its
 * own, over an in-memory Duplex, and N masked Twilio media frames, each a read of its own (as at
 * real cadence: one frame per 20 ms per socket), pushed into the socket's stream as Node's socket
 * pushes each read (so the stream's own part, per read, is in both ways). The kernel's part (the
 * read itself, the same for both) is left out, so the difference is not lost in it. Ways
 * alternate, best of the rounds.
 *
 *   npx tsx bench/receiveCost.ts [--frames 300000] [--rounds 5]
 */
import { Duplex } from "node:stream"
import { parseArgs } from "node:util"
import { WebSocket } from "ws"
import { twilioInboundEncoder } from "../src/frames/TwilioFrames.js"
import { wsWireSocket } from "../src/websocket/WsWireSocket.js"

const { values: args } = parseArgs({ options: { frames: { type: "string", default: "300000" }, rounds: { type: "string", default: "5" } } })
const FRAMES = Number(args.frames)
const ROUNDS = Number(args.rounds)

/** A media frame as a carrier sends it: masked, with a 16-bit length (it is over 125 bytes). */
const wireFrame = (() => {
  const text = Buffer.from(twilioInboundEncoder("MZ0123456789abcdef0123456789abcdef").media(1, 1, 20, Buffer.alloc(160, 0x55).toString("base64")))
  const mask = [0x1f, 0x2e, 0x3d, 0x4c]
  const header = Buffer.from([0x81, 0x80 | 126, text.length >> 8, text.length & 0xff, ...mask])
  return Buffer.concat([header, text.map((byte, i) => byte ^ mask[i & 3]!)])
})()

type Way = "ws 'message' + toString, as the bare relay" | "WsWireSocket (callgate)"
const ways: ReadonlyArray<Way> = ["ws 'message' + toString, as the bare relay", "WsWireSocket (callgate)"]

const serverSocket = () => {
  const socket = new Duplex({ read() {}, write: (_chunk, _encoding, done) => done() })
  const ws = new WebSocket(null as unknown as string, undefined, { autoPong: true } as never)
  ;(ws as unknown as { setSocket(socket: Duplex, head: Buffer, options: object): void }).setSocket(socket, Buffer.alloc(0), {
    allowSynchronousEvents: true,
    maxBufferedChunks: 256 * 1024,
    maxFragments: 16 * 1024,
    maxPayload: 64 * 1024
  })
  return { ws, socket }
}

/**
 * Nanoseconds per frame, one way; every frame must reach the listener whole. Each read is followed
 * by the end of its turn (the same for both ways): the ticks it queued (the stream's), then the
 * microtasks, as after a socket's read callback (callgate's per-socket budget counts messages per
 * turn: websocket/SocketGate.ts).
 */
const endOfTurn = () => new Promise<void>((resolve) => process.nextTick(resolve))

const round = async (way: Way): Promise<number> => {
  const { ws, socket } = serverSocket()
  let characters = 0
  const hear = (text: string) => {
    characters += text.length
  }
  if (way === "WsWireSocket (callgate)") wsWireSocket(ws, { onText: hear, onClose: () => {} })
  else ws.on("message", (data, isBinary) => hear(isBinary ? "" : data.toString()))
  // Fresh copies: both ways unmask in place.
  const reads = Array.from({ length: FRAMES }, () => Buffer.from(wireFrame))
  const started = process.hrtime.bigint()
  for (const read of reads) {
    socket.push(read)
    await endOfTurn()
  }
  const elapsed = Number(process.hrtime.bigint() - started)
  if (characters !== FRAMES * (wireFrame.length - 8)) throw new Error(`${way}: the frames did not all arrive whole`)
  ws.terminate()
  return elapsed / FRAMES
}

const results = new Map<Way, Array<number>>(ways.map((way) => [way, []]))
for (let r = 0; r < ROUNDS; r++) for (const way of ways) results.get(way)!.push(await round(way))
for (const [way, perFrame] of results) {
  const best = Math.min(...perFrame)
  process.stdout.write(`${way}: ${best.toFixed(0)} ns per frame (best of ${ROUNDS}; all: ${perFrame.map((v) => v.toFixed(0)).join(", ")})\n`)
}
