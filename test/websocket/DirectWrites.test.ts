import { type AddressInfo, createServer, type Server, Socket, connect } from "node:net"
import { Duplex } from "node:stream"
import { afterEach, describe, expect, it } from "vitest"
import { WebSocket, WebSocketServer } from "ws"
import { DirectWrites } from "../../src/websocket/DirectWrites.js"
import { wsWireSocket } from "../../src/websocket/WsWireSocket.js"

/**
 * Media frames go to a TCP socket past its Writable stream when the stream holds nothing. The
 * bytes must arrive exactly as if every write had gone through the stream (in call order, however
 * the two kinds interleave), and what the kernel has not taken must still count as the socket's
 * backlog. Real sockets over loopback.
 */

const closers: Array<() => void> = []
afterEach(() => {
  for (const close of closers.splice(0)) close()
})

/** A connected pair of TCP sockets: the writer, and the reader's received bytes as text. */
const pair = async () => {
  let accepted!: (socket: Socket) => void
  const readerSocket = new Promise<Socket>((resolve) => (accepted = resolve))
  const server: Server = createServer((socket) => accepted(socket))
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const writer = connect((server.address() as AddressInfo).port, "127.0.0.1")
  await new Promise((resolve) => writer.once("connect", resolve))
  const reader = await readerSocket
  let text = ""
  let waiting: { length: number; resolve: () => void } | undefined
  reader.setEncoding("latin1")
  reader.on("data", (chunk: string) => {
    text += chunk
    if (waiting !== undefined && text.length >= waiting.length) waiting.resolve()
  })
  closers.push(() => {
    writer.destroy()
    reader.destroy()
    server.close()
  })
  return {
    writer,
    reader,
    received: (length: number) =>
      new Promise<string>((resolve) => {
        if (text.length >= length) return resolve(text)
        waiting = { length, resolve: () => resolve(text) }
      })
  }
}

describe("DirectWrites", () => {
  it("is taken on a connected TCP socket and refused elsewhere (an in-memory stream, a socket without a handle)", async () => {
    const { writer } = await pair()
    expect(DirectWrites.of(writer)).toBeInstanceOf(DirectWrites)
    expect(DirectWrites.of(new Duplex({ read() {}, write: (_c, _e, done) => done() }))).toBeUndefined()
    expect(DirectWrites.of(new Socket())).toBeUndefined()
  })

  it("keeps call order with the stream's own writes: past the stream only while it holds nothing", async () => {
    const { writer, received } = await pair()
    const direct = DirectWrites.of(writer)!
    const out: Array<string> = []
    // Each piece either goes past the stream or, refused, through it: the reader must see them in call order.
    const write = (piece: string) => {
      out.push(piece)
      if (!direct.write(piece)) writer.write(piece, "latin1")
    }
    write("a1")
    writer.write("b2", "latin1")
    out.push("b2")
    write("c3")
    writer.cork()
    writer.write("d4", "latin1")
    out.push("d4")
    // The stream holds d4 (corked): e5 must not overtake it.
    expect(direct.write("e5")).toBe(false)
    writer.write("e5", "latin1")
    out.push("e5")
    writer.uncork()
    write("f6")
    const expected = out.join("")
    expect(await received(expected.length)).toBe(expected)
  })

  it("does not overtake what the stream holds behind a write the kernel has not taken", async () => {
    const { writer, reader, received } = await pair()
    const direct = DirectWrites.of(writer)!
    reader.pause()
    // The reader stops reading: fill the kernel's buffers until libuv holds bytes (at most 64 MB).
    const block = "x".repeat(64 * 1024)
    let filled = 0
    while (direct.queued === 0 && filled < 1024) {
      expect(direct.write(block)).toBe(true)
      filled++
    }
    expect(direct.queued).toBeGreaterThan(0)
    writer.write("S1", "latin1") // to libuv, behind the queue: the stream is writing
    writer.write("S2", "latin1") // held by the stream
    expect(direct.write("D3")).toBe(false)
    writer.write("D3", "latin1")
    reader.resume()
    const all = await received(filled * block.length + 6)
    expect(all.slice(filled * block.length)).toBe("S1S2D3")
  })

  it("refuses once the stream is ending, so nothing is written after its end", async () => {
    const { writer, received } = await pair()
    const direct = DirectWrites.of(writer)!
    expect(direct.write("last")).toBe(true)
    writer.end()
    expect(direct.write("too late")).toBe(false)
    expect(await received(4)).toBe("last")
  })
})

describe("WsWireSocket over DirectWrites", () => {
  it("a peer that stops reading shows as backlog (what the agent-backpressure limit reads), and every frame still arrives in order", async () => {
    const server = new WebSocketServer({ host: "127.0.0.1", port: 0 })
    await new Promise((resolve) => server.once("listening", resolve))
    const serverSide = new Promise<WebSocket>((resolve) => server.once("connection", resolve))
    const client = new WebSocket(`ws://127.0.0.1:${(server.address() as AddressInfo).port}`)
    closers.push(() => {
      client.terminate()
      server.close()
    })
    await new Promise((resolve) => client.once("open", resolve))
    const wire = wsWireSocket(await serverSide)
    const texts: Array<string> = []
    let onMessage = () => {}
    client.on("message", (data) => {
      texts.push(data.toString())
      onMessage()
    })
    client.pause()

    const frame = (i: number) => `{"event":"media","n":${i},"payload":"${"A".repeat(320)}"}`
    // Until the kernel's buffers are full and libuv holds the rest: at most 200,000 frames (about 70 MB).
    let sent = 0
    while (wire.bufferedAmount < 4 * 2 ** 20 && sent < 200_000) {
      for (let i = 0; i < 500; i++) wire.sendAscii(frame(sent++))
      await new Promise((resolve) => setImmediate(resolve))
    }
    expect(wire.bufferedAmount).toBeGreaterThanOrEqual(4 * 2 ** 20)

    const all = new Promise<void>((resolve) => {
      onMessage = () => {
        if (texts.length === sent) resolve()
      }
    })
    client.resume()
    await all
    expect(texts.every((text, i) => text === frame(i))).toBe(true)
    // libuv reports its queue empty once its write callbacks have run: a few turns of the loop at most.
    for (let turn = 0; turn < 10_000 && wire.bufferedAmount > 0; turn++) await new Promise((resolve) => setImmediate(resolve))
    expect(wire.bufferedAmount).toBe(0)
  })
})
