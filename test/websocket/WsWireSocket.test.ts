import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { WebSocket, WebSocketServer } from "ws"
import type { WireSocket } from "../../src/frames/WireSocket.js"
import { wsWireSocket } from "../../src/websocket/WsWireSocket.js"
import { twilioOutboundEncoder } from "../../src/frames/TwilioFrames.js"

/**
 * The adapter's two ways out: `send` (any text, UTF-8) and `sendAscii` (the media frames, handed to
 * `ws` as bytes). A peer must not be able to tell them apart: both arrive as text messages with the
 * same content. Real `ws` sockets over loopback.
 */
describe("WsWireSocket sends", () => {
  let server: WebSocketServer
  let socket: Promise<WireSocket>
  /** Messages the server side handed to `ws.send` (sendAscii writes most frames itself). */
  let wsSends = 0
  let client: WebSocket
  const received: Array<{ text: string; isBinary: boolean }> = []
  let onReceived: () => void = () => {}

  beforeAll(async () => {
    server = new WebSocketServer({ host: "127.0.0.1", port: 0 })
    await new Promise((resolve) => server.once("listening", resolve))
    socket = new Promise((resolve) =>
      server.once("connection", (ws) => {
        const send = ws.send.bind(ws)
        ws.send = ((...args: Parameters<typeof ws.send>) => {
          wsSends++
          return send(...args)
        }) as typeof ws.send
        resolve(wsWireSocket(ws))
      })
    )
    client = new WebSocket(`ws://127.0.0.1:${(server.address() as AddressInfo).port}`)
    client.on("message", (data, isBinary) => {
      received.push({ text: data.toString(), isBinary })
      onReceived()
    })
    await new Promise((resolve) => client.once("open", resolve))
  })
  afterAll(async () => {
    client.terminate()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })

  const nextMessages = (count: number) =>
    new Promise<void>((resolve) => {
      onReceived = () => {
        if (received.length >= count) resolve()
      }
    })

  it("sendAscii delivers a text message identical to what send delivers", async () => {
    const wire = await socket
    const encoder = twilioOutboundEncoder("MZ0123456789abcdef")
    expect(encoder.mediaIsAscii).toBe(true)
    const frame = encoder.media(Buffer.alloc(160, 0xff).toString("base64"))
    const arrived = nextMessages(3)
    const sendsBefore = wsSends
    wire.send(frame)
    wire.sendAscii(frame)
    wire.send(`{"event":"mark","name":"é ✓ 𝄞"}`)
    // Only the text that is not ASCII went through ws.send.
    expect(wsSends - sendsBefore).toBe(1)
    await arrived
    expect(received).toEqual([
      { text: frame, isBinary: false },
      { text: frame, isBinary: false },
      { text: `{"event":"mark","name":"é ✓ 𝄞"}`, isBinary: false }
    ])
  })

  it("frames sendAscii writes itself read exactly as ws's own, at every header size (short, 16-bit length, and ws's beyond)", async () => {
    const wire = await socket
    const lengths = [0, 1, 125, 126, 127, 333, 65_535, 65_536, 70_000]
    const texts = lengths.map((length, i) => "abcdefghijklmnopqrstuvwxyz0123456789"[i]!.repeat(length))
    const start = received.length
    const arrived = nextMessages(start + texts.length * 2)
    const sendsBefore = wsSends
    for (const text of texts) {
      wire.sendAscii(text)
      wire.send(text)
    }
    // An ASCII text is written here by send and sendAscii alike; ws.send only takes those whose 16-bit length no longer fits (65,536 and 70,000).
    expect(wsSends - sendsBefore).toBe(4)
    await arrived
    expect(received.slice(start).map((m) => [m.text.length, m.isBinary, m.text === texts[lengths.indexOf(m.text.length)]])).toEqual(
      lengths.flatMap((length) => [
        [length, false, true],
        [length, false, true]
      ])
    )
  })

  it("a client-side socket (callgate dialing an agent) sends masked frames through ws: the server reads them", async () => {
    const serverSide = new Promise<Array<string>>((resolve) => {
      const texts: Array<string> = []
      server.once("connection", (ws) =>
        ws.on("message", (data) => {
          texts.push(data.toString())
          if (texts.length === 2) resolve(texts)
        })
      )
    })
    const dialer = new WebSocket(`ws://127.0.0.1:${(server.address() as AddressInfo).port}`)
    await new Promise((resolve) => dialer.once("open", resolve))
    const wire = wsWireSocket(dialer)
    wire.sendAscii(`{"event":"media","media":{"payload":"AAAA"}}`)
    wire.sendAscii("x".repeat(300))
    expect(await serverSide).toEqual([`{"event":"media","media":{"payload":"AAAA"}}`, "x".repeat(300)])
    dialer.terminate()
  })

  it("an encoder whose stream id is not ASCII says its media frames must go through send", () => {
    expect(twilioOutboundEncoder("MZ-é").mediaIsAscii).toBe(false)
  })
})
