import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { WebSocket, WebSocketServer } from "ws"
import type { WireSocket } from "../../src/core/WireSocket.js"
import { wsWireSocket } from "../../src/ws/WsWireSocket.js"
import { twilioOutboundEncoder } from "../../src/wire/TwilioFrames.js"

/**
 * The adapter's two ways out: `send` (any text, UTF-8) and `sendAscii` (the media frames, handed to
 * `ws` as bytes). A peer must not be able to tell them apart: both arrive as text messages with the
 * same content. Real `ws` sockets over loopback.
 */
describe("WsWireSocket sends", () => {
  let server: WebSocketServer
  let socket: Promise<WireSocket>
  let client: WebSocket
  const received: Array<{ text: string; isBinary: boolean }> = []
  let onReceived: () => void = () => {}

  beforeAll(async () => {
    server = new WebSocketServer({ host: "127.0.0.1", port: 0 })
    await new Promise((resolve) => server.once("listening", resolve))
    socket = new Promise((resolve) => server.once("connection", (ws) => resolve(wsWireSocket(ws))))
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
    wire.send(frame)
    wire.sendAscii(frame)
    wire.send(`{"event":"mark","name":"é ✓ 𝄞"}`)
    await arrived
    expect(received).toEqual([
      { text: frame, isBinary: false },
      { text: frame, isBinary: false },
      { text: `{"event":"mark","name":"é ✓ 𝄞"}`, isBinary: false }
    ])
  })

  it("an encoder whose stream id is not ASCII says its media frames must go through send", () => {
    expect(twilioOutboundEncoder("MZ-é").mediaIsAscii).toBe(false)
  })
})
