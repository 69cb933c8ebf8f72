import fc from "fast-check"
import type { AddressInfo } from "node:net"
import { Duplex } from "node:stream"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { WebSocket, WebSocketServer } from "ws"
import { readFramesOf } from "../../src/websocket/WsFrameReader.js"
import { wsWireSocket } from "../../src/websocket/WsWireSocket.js"
import { MAX_WS_MESSAGE_BYTES } from "../../src/http/HttpApp.js"

/**
 * The reader that takes whole text frames (and pings and pongs) off a server socket before `ws`
 * sees them must be invisible: for any bytes a client may send, cut into reads anywhere, a socket
 * it reads must give the same messages, the same replies on the wire (pongs, close frames), the
 * same errors and the same close as a socket `ws` reads alone. Each case runs the same bytes
 * through both, in memory (a Duplex per socket, so the reads are cut exactly where the case says).
 */

const MAX_PAYLOAD = 1024
const RUNS = 2000

/** One frame as a client could send it: fields chosen freely, including ones `ws` refuses. */
interface FrameSpec {
  readonly fin: boolean
  readonly rsv: number
  readonly opcode: number
  readonly masked: boolean
  readonly mask: ReadonlyArray<number>
  readonly payload: Uint8Array
  /** Length encoding: the shortest, or a longer one than needed (16- or 64-bit). */
  readonly lengthAs: "shortest" | "medium" | "long"
}

const encode = (frame: FrameSpec): Buffer => {
  const length = frame.payload.length
  const marker = frame.lengthAs === "long" ? 127 : frame.lengthAs === "medium" || length > 125 ? (length > 0xffff ? 127 : 126) : length
  const extra = marker === 126 ? 2 : marker === 127 ? 8 : 0
  const header = Buffer.alloc(2 + extra + (frame.masked ? 4 : 0))
  header[0] = (frame.fin ? 0x80 : 0) | (frame.rsv << 4) | frame.opcode
  header[1] = (frame.masked ? 0x80 : 0) | marker
  if (marker === 126) header.writeUInt16BE(length, 2)
  if (marker === 127) header.writeBigUInt64BE(BigInt(length), 2)
  const payload = Buffer.from(frame.payload)
  if (frame.masked) {
    for (let i = 0; i < 4; i++) header[2 + extra + i] = frame.mask[i]!
    for (let i = 0; i < payload.length; i++) payload[i]! ^= frame.mask[i & 3]!
  }
  return Buffer.concat([header, payload])
}

const ascii = (min: number, max: number) =>
  fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((code) => String.fromCharCode(code)), minLength: min, maxLength: max }).map((text) => Buffer.from(text, "latin1"))
const unicode = fc.string({ unit: "grapheme", maxLength: 60 }).map((text) => Buffer.from(text, "utf8"))
const bytes = (max: number) => fc.uint8Array({ maxLength: max })

/** Payloads: mostly what real traffic carries (ASCII, often past 125 bytes), then the rest. */
const payload = fc.oneof(
  { weight: 6, arbitrary: ascii(0, 125) },
  { weight: 4, arbitrary: ascii(126, 400) },
  { weight: 1, arbitrary: ascii(MAX_PAYLOAD - 2, MAX_PAYLOAD + 2) },
  { weight: 2, arbitrary: unicode },
  { weight: 1, arbitrary: bytes(200) }
)

const mask = fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 4, maxLength: 4 })

/**
 * The side of the socket under test: a server reads masked frames from its client, a client
 * (callgate dialing an agent) unmasked frames from its server (RFC 6455 5.1).
 */
type Side = "server" | "client"

/** A valid text frame as the peer sends it. */
const textFrame = (masked: boolean) =>
  fc.record({ payload, mask }).map(({ payload, mask }): FrameSpec => ({ fin: true, rsv: 0, opcode: 1, masked, mask, payload, lengthAs: "shortest" }))
const controlFrame = (masked: boolean) =>
  fc
    .record({ opcode: fc.constantFrom(9, 10), payload: bytes(125), mask })
    .map(({ opcode, payload, mask }): FrameSpec => ({ fin: true, rsv: 0, opcode, masked, mask, payload, lengthAs: "shortest" }))
/** Anything at all: any opcode, reserved bits, fragments, unmasked, long length encodings, close frames. */
const anyFrame = fc.record({
  fin: fc.boolean(),
  rsv: fc.oneof({ weight: 4, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 7 }) }),
  opcode: fc.oneof({ weight: 3, arbitrary: fc.constantFrom(0, 1, 2, 8, 9, 10) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 15 }) }),
  masked: fc.oneof({ weight: 4, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
  mask,
  payload,
  lengthAs: fc.constantFrom("shortest", "medium", "long") as fc.Arbitrary<FrameSpec["lengthAs"]>
})
const closeFrame = (masked: boolean) =>
  fc.record({ code: fc.constantFrom(1000, 1001, 1011, 999, 4000), reason: ascii(0, 20), mask }).map(({ code, reason, mask }): FrameSpec => {
    const payload = Buffer.alloc(2 + reason.length)
    payload.writeUInt16BE(code, 0)
    reason.copy(payload, 2)
    return { fin: true, rsv: 0, opcode: 8, masked, mask, payload, lengthAs: "shortest" }
  })

const frame = (masked: boolean) =>
  fc.oneof(
    { weight: 12, arbitrary: textFrame(masked) },
    { weight: 2, arbitrary: controlFrame(masked) },
    { weight: 2, arbitrary: anyFrame },
    { weight: 1, arbitrary: closeFrame(masked) },
    { weight: 1, arbitrary: bytes(12).map((garbage) => ({ garbage })) }
  )

/** A case: frames, and where the bytes are cut into reads (fractions of the whole). */
const session = (side: Side) => fc.record({
  frames: fc.array(frame(side === "server"), { minLength: 1, maxLength: 14 }),
  cuts: fc.oneof(
    fc.constant([] as Array<number>),
    fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 12 }),
    fc.constant("every byte" as const)
  )
})

const bytesOf = (frames: ReadonlyArray<FrameSpec | { garbage: Uint8Array }>) => Buffer.concat(frames.map((f) => ("garbage" in f ? Buffer.from(f.garbage) : encode(f))))

const readsOf = (all: Buffer, cuts: ReadonlyArray<number> | "every byte"): Array<Buffer> => {
  if (cuts === "every byte") return Array.from(all, (byte) => Buffer.from([byte]))
  const points = [...new Set(cuts.map((cut) => Math.floor(cut * all.length)))].filter((p) => p > 0 && p < all.length).sort((a, b) => a - b)
  const reads: Array<Buffer> = []
  let from = 0
  for (const point of [...points, all.length]) {
    reads.push(all.subarray(from, point))
    from = point
  }
  return reads
}

/**
 * How reads reach the socket's stream: "push", as any Duplex is fed (the reader takes them from
 * the stream's push); "shared", as a net.Socket reads (OnreadDuplex below: the reader has the
 * socket read into its one shared buffer).
 */
type Transport = "push" | "shared"

const slotOf = (socket: object, name: string): symbol => Object.getOwnPropertySymbols(socket).find((key) => key.description === name)!

/**
 * An in-memory Duplex with what a net.Socket has for its `onread` option: the own-symbol slots
 * (kBuffer, kBufferCb, kBufferGen, null until set) and a handle whose `useUserBuffer` takes the
 * buffer reads land in. Until it is given one, a fed read is pushed to the stream. After, each read
 * is copied into that buffer and handed to the callback, as Node's onStreamRead does, then the
 * buffer is overwritten (so a view kept past its read shows garbage); a callback answering false,
 * or a pause, stops the reads until the stream asks again (`_read`, resume), and the reads fed
 * meanwhile wait, in order, as the kernel would hold them.
 */
class OnreadDuplex extends Duplex {
  private userBuffer: Buffer | undefined
  private reading = true
  private readonly fed: Array<Buffer | null> = []
  /** Reads handed to the callback (that is, into the shared buffer). */
  callbackReads = 0
  readonly _handle = { useUserBuffer: (buffer: Buffer) => void (this.userBuffer = buffer) }

  constructor(private readonly wrote: Array<Buffer>) {
    super()
    for (const name of ["kBuffer", "kBufferCb", "kBufferGen"]) (this as unknown as Record<symbol, unknown>)[Symbol(name)] = null
  }

  override _read(): void {
    this.startReading()
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: () => void): void {
    this.wrote.push(Buffer.from(chunk))
    done()
  }

  override pause(): this {
    if (this.userBuffer !== undefined) this.reading = false
    return super.pause()
  }

  override resume(): this {
    this.startReading()
    return super.resume()
  }

  feed(read: Buffer | null): void {
    this.fed.push(read)
    this.deliver()
  }

  /** Node restarts a stopped handle; its next read comes from the event loop, never within the call. */
  private startReading(): void {
    if (this.userBuffer === undefined || this.reading) return
    this.reading = true
    setImmediate(() => this.deliver())
  }

  private deliver(): void {
    const fields = this as unknown as Record<symbol, unknown>
    while (this.fed.length > 0 && !this.destroyed) {
      const buffer = this.userBuffer
      if (buffer === undefined || fields[slotOf(this, "kBuffer")] == null) {
        this.push(this.fed.shift()!)
        continue
      }
      if (!this.reading) return
      const read = this.fed.shift()!
      if (read === null) {
        this.push(null)
        continue
      }
      const callback = fields[slotOf(this, "kBufferCb")] as (length: number, buffer: Buffer) => unknown
      for (let at = 0; at < read.length; ) {
        const length = Math.min(buffer.length, read.length - at)
        read.copy(buffer, 0, at, at + length)
        at += length
        this.callbackReads++
        const more = callback(length, buffer) !== false
        buffer.fill(0xee, 0, length)
        if (!more) {
          this.reading = false
          if (at < read.length) this.fed.unshift(read.subarray(at))
          return
        }
      }
    }
  }
}

/** Feeds one read (or the end) to a test socket, by its transport. */
const feed = (socket: Duplex, read: Buffer | null) => (socket instanceof OnreadDuplex ? socket.feed(read) : socket.push(read))

/**
 * A `ws` socket on an in-memory Duplex, set up as WebSocketServer sets up its own (a client side
 * is the same with `_isServer` cleared, and a fixed mask so that what it writes can be compared).
 */
const serverSocket = (options: object = {}, wrote: Array<Buffer> = [], side: Side = "server", transport: Transport = "push") => {
  const socket =
    transport === "shared"
      ? new OnreadDuplex(wrote)
      : new Duplex({
          read() {},
          write(chunk: Buffer, _encoding, done) {
            wrote.push(Buffer.from(chunk))
            done()
          }
        })
  const ws = new WebSocket(null as unknown as string, undefined, { autoPong: true, maxPendingAutoPongs: 60 } as never)
  if (side === "client") (ws as unknown as { _isServer: boolean })._isServer = false
  ;(ws as unknown as { setSocket(socket: Duplex, head: Buffer, options: object): void }).setSocket(socket, Buffer.alloc(0), {
    allowSynchronousEvents: true,
    maxBufferedChunks: 256 * 1024,
    maxFragments: 16 * 1024,
    maxPayload: MAX_PAYLOAD,
    skipUTF8Validation: false,
    generateMask: (mask: Buffer) => mask.fill(0x5a),
    ...options
  })
  return ws
}

/** Everything observable of one server socket fed `reads`: events in order, and the bytes it wrote. */
const observe = (reads: ReadonlyArray<Buffer>, withReader: boolean, side: Side = "server", transport: Transport = "push") =>
  new Promise<{ events: Array<unknown>; wrote: string; tookOver: boolean; readHere: number; callbackReads: number }>((resolve) => {
    let readHere = 0
    const events: Array<unknown> = []
    const wrote: Array<Buffer> = []
    const ws = serverSocket({}, wrote, side, transport)
    const socket = (ws as unknown as { _socket: Duplex })._socket
    ws.on("message", (data, isBinary) => events.push(["message", isBinary ? `binary ${(data as Buffer).toString("hex")}` : data.toString()]))
    ws.on("ping", (data) => events.push(["ping", data.toString("hex")]))
    ws.on("pong", (data) => events.push(["pong", data.toString("hex")]))
    ws.on("error", (error: Error & { code?: string }) => events.push(["error", error.message, error.code]))
    ws.on("close", (code, reason) => {
      events.push(["close", code, reason.toString()])
      resolve({ events, wrote: Buffer.concat(wrote).toString("hex"), tookOver, readHere, callbackReads: socket instanceof OnreadDuplex ? socket.callbackReads : 0 })
    })
    const tookOver =
      withReader &&
      readFramesOf(ws, (text) => {
        readHere++
        events.push(["message", text])
      })
    // Copies: both readers unmask in place.
    for (const read of reads) if (!socket.destroyed) feed(socket, Buffer.from(read))
    if (!socket.destroyed) feed(socket, null)
  })

describe("WsFrameReader against ws alone", () => {
  for (const side of ["server", "client"] as const) {
    it(`${side} side: the same bytes, cut into reads anywhere, give the same messages, replies, errors and close (10,000+ frames)`, async () => {
      let frames = 0
      let cases = 0
      let readHere = 0
      let sharedReads = 0
      await fc.assert(
        fc.asyncProperty(session(side), async ({ frames: specs, cuts }) => {
          const reads = readsOf(bytesOf(specs), cuts)
          const alone = await observe(reads, false, side)
          const read = await observe(reads, true, side)
          expect(read.tookOver).toBe(true)
          expect(read.events).toEqual(alone.events)
          expect(read.wrote).toBe(alone.wrote)
          // The same, reading into the shared buffer as a TCP socket does.
          const shared = await observe(reads, true, side, "shared")
          expect(shared.tookOver).toBe(true)
          expect(shared.events).toEqual(alone.events)
          expect(shared.wrote).toBe(alone.wrote)
          frames += specs.length
          readHere += read.readHere
          sharedReads += shared.callbackReads
          cases++
        }),
        { numRuns: RUNS }
      )
      expect(cases).toBe(RUNS)
      expect(frames).toBeGreaterThanOrEqual(10_000)
      // Most messages were the reader's own, not ws's after a hand-over.
      expect(readHere).toBeGreaterThan(frames / 4)
      expect(sharedReads).toBeGreaterThan(cases)
    })
  }

  it("sees a byte over 0x7f wherever it is in the payload (every offset, aligned or not, alone or in a character)", async () => {
    for (let length = 30; length <= 70; length += 7) {
      for (let at = 0; at < length; at++) {
        for (const [inserted, lead] of [[[0xe9], 0], [[0xe9], 1], [[0xc3, 0xa9], 0], [[0xc3, 0xa9], 1]] as const) {
          for (const side of ["server", "client"] as const) {
            const payload = Buffer.alloc(length, 0x61)
            Buffer.from(inserted).copy(payload, Math.min(at, length - inserted.length))
            const masked = side === "server"
            const spec: FrameSpec = { fin: true, rsv: 0, opcode: 1, masked, mask: [7, 0x81, 0x33, 0xfe], payload, lengthAs: "shortest" }
            // A frame before it whose length moves its payload onto a 4-byte boundary, or off one.
            const reads = [bytesOf([{ ...spec, payload: Buffer.from("x".repeat(lead)) }, spec])]
            const alone = await observe(reads, false, side)
            const read = await observe(reads, true, side)
            expect(read.events).toEqual(alone.events)
            expect((await observe(reads, true, side, "shared")).events).toEqual(alone.events)
          }
        }
      }
    }
  })

  it("reads real traffic itself: whole text frames, in one read or cut anywhere, never reach ws's receiver", async () => {
    const texts = ["a".repeat(300), "", `{"event":"media","media":{"payload":"${"A".repeat(216)}"}}`, "é ✓ 𝄞"]
    const all = bytesOf(texts.map((text) => ({ fin: true, rsv: 0, opcode: 1, masked: true, mask: [1, 2, 3, 4], payload: Buffer.from(text), lengthAs: "shortest" as const })))
    for (const reads of [[all], readsOf(all, "every byte"), readsOf(all, [0.1, 0.5, 0.51])]) {
      const ws = serverSocket()
      const viaWs: Array<string> = []
      ws.on("message", (data) => viaWs.push(data.toString()))
      const viaReader: Array<string> = []
      expect(readFramesOf(ws, (text) => viaReader.push(text))).toBe(true)
      const receiver = (ws as unknown as { _receiver: { _bufferedBytes: number; write: (chunk: Buffer) => boolean } })._receiver
      let bytesToWs = 0
      const write = receiver.write.bind(receiver)
      receiver.write = (chunk) => {
        bytesToWs += chunk.length
        return write(chunk)
      }
      const closed = new Promise((resolve) => ws.once("close", resolve))
      const socket = (ws as unknown as { _socket: Duplex })._socket
      for (const read of reads) socket.push(Buffer.from(read))
      socket.push(null)
      await closed
      expect(viaReader).toEqual(texts)
      expect(viaWs).toEqual([])
      expect(bytesToWs).toBe(0)
    }
  })

  it("takes reads straight from the socket's push only while its stream flows empty: paused reads wait in the stream, in order, and a hand-over gives push back", async () => {
    const textFrame = (text: string) => encode({ fin: true, rsv: 0, opcode: 1, masked: true, mask: [9, 8, 7, 6], payload: Buffer.from(text), lengthAs: "shortest" })
    const ws = serverSocket()
    const viaWs: Array<string> = []
    ws.on("message", (data) => viaWs.push(data.toString()))
    const heard: Array<string> = []
    expect(readFramesOf(ws, (text) => heard.push(text))).toBe(true)
    const socket = (ws as unknown as { _socket: Duplex })._socket
    const state = (socket as unknown as { _readableState: { length: number; reading: boolean } })._readableState
    expect(Object.hasOwn(socket, "push")).toBe(true)
    // Not yet reading (the stream starts flowing on the next tick): the stream's own push, through data.
    expect(state.reading).toBe(false)
    socket.push(textFrame("zero"))
    await new Promise((resolve) => setImmediate(resolve))
    expect(heard).toEqual(["zero"])
    expect(state.reading).toBe(true)
    heard.length = 0

    socket.push(textFrame("one"))
    // Straight to the reader: heard before push returns, nothing held by the stream.
    expect(heard).toEqual(["one"])
    ws.pause()
    socket.push(textFrame("two"))
    socket.push(textFrame("three"))
    expect(heard).toEqual(["one"])
    expect(state.length).toBeGreaterThan(0)
    const flushed = new Promise<void>((resolve) => socket.once("data", () => setImmediate(resolve)))
    ws.resume()
    // Held bytes first: a read while the stream still holds some goes behind them.
    socket.push(textFrame("four"))
    await flushed
    expect(heard).toEqual(["one", "two", "three", "four"])
    expect(state.length).toBe(0)

    // A binary frame is ws's: the socket goes back to its own push and ws reads the rest.
    socket.push(encode({ fin: true, rsv: 0, opcode: 2, masked: true, mask: [1, 1, 1, 1], payload: Buffer.from([1]), lengthAs: "shortest" }))
    expect(Object.hasOwn(socket, "push")).toBe(false)
    const closed = new Promise((resolve) => ws.once("close", resolve))
    socket.push(textFrame("five"))
    socket.push(null)
    await closed
    expect(heard).toEqual(["one", "two", "three", "four"])
    expect(viaWs).toEqual(["\u0001", "five"])
  })

  it("leaves a socket alone when it cannot read it exactly as ws would: a second message listener, bytes already with ws, other receiver settings, not yet open", async () => {
    const server = (options: object = {}) => {
      const ws = serverSocket(options)
      ws.on("message", () => {})
      return ws
    }
    expect(readFramesOf(server(), () => {})).toBe(true)
    const twoListeners = server()
    twoListeners.on("message", () => {})
    expect(readFramesOf(twoListeners, () => {})).toBe(false)
    const started = server()
    const socket = (started as unknown as { _socket: Duplex })._socket
    // ws's listener came first: once this one hears the byte, ws's receiver has it.
    const read = new Promise((resolve) => socket.once("data", resolve))
    socket.push(Buffer.from([0x81]))
    await read
    expect(readFramesOf(started, () => {})).toBe(false)
    expect(readFramesOf(server({ skipUTF8Validation: true }), () => {})).toBe(false)
    expect(readFramesOf(server({ maxBufferedChunks: 16 }), () => {})).toBe(false)
    const client = new WebSocket("ws://127.0.0.1:9", { autoPong: true })
    client.on("error", () => {})
    client.on("message", () => {})
    expect(readFramesOf(client, () => {})).toBe(false)
    client.terminate()
  })
})

/** Over loopback, through the adapter: a real client's messages, pings and close, as the listener hears them. */
describe("WsFrameReader over a real socket", () => {
  let server: WebSocketServer
  let client: WebSocket
  const heard: Array<unknown> = []
  let closed: Promise<void>
  let onHeard: () => void = () => {}
  /** Bytes handed to ws's own receiver: none while the reader reads everything. */
  let bytesToWs = 0

  beforeAll(async () => {
    // As HttpApp registers @fastify/websocket: ws's server defaults and a 64 KiB maxPayload.
    server = new WebSocketServer({ host: "127.0.0.1", port: 0, maxPayload: MAX_WS_MESSAGE_BYTES })
    await new Promise((resolve) => server.once("listening", resolve))
    closed = new Promise((resolve) =>
      server.once("connection", (ws) => {
        const receiver = (ws as unknown as { _receiver: { write: (chunk: Buffer) => boolean } })._receiver
        const write = receiver.write.bind(receiver)
        receiver.write = (chunk) => {
          bytesToWs += chunk.length
          return write(chunk)
        }
        wsWireSocket(ws, {
          onText: (text) => {
            heard.push(text)
            onHeard()
          },
          onClose: (code, reason, fault) => {
            heard.push({ code, reason, fault })
            resolve()
          }
        })
      })
    )
    client = new WebSocket(`ws://127.0.0.1:${(server.address() as AddressInfo).port}`)
    await new Promise((resolve) => client.once("open", resolve))
  })
  afterAll(async () => {
    client.terminate()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })

  it("hears every text in order, answers pings, and then closes with the client's code", async () => {
    const texts = Array.from({ length: 200 }, (_, i) => (i % 7 === 0 ? `✓ ${i} ${"x".repeat(i)}` : `{"n":${i},"pad":"${"p".repeat(i * 3)}"}`))
    const all = new Promise<void>((resolve) => {
      onHeard = () => {
        if (heard.length === texts.length) resolve()
      }
    })
    const pong = new Promise((resolve) => client.once("pong", (data) => resolve(data.toString())))
    client.ping("are you there")
    for (const text of texts) client.send(text)
    await all
    expect(heard).toEqual(texts)
    expect(await pong).toBe("are you there")
    // Every text and the ping were read by callgate; the close frame is ws's to read.
    expect(bytesToWs).toBe(0)
    client.close(4000, "done")
    await closed
    expect(heard.at(-1)).toEqual({ code: 4000, reason: "done", fault: undefined })
    expect(bytesToWs).toBeGreaterThan(0)
  })
})

describe("WsFrameReader and the sockets' shape", () => {
  it("gives every socket it takes the same properties in the same order, whether a route reads its address afterwards or never", async () => {
    // A carrier stream's route reads request.ip after the upgrade, an agent's never: Node caches the
    // address on the socket, and an own property added to some sockets only would give the per-read
    // and per-write code two hidden classes to handle (see settleShape).
    const server = new WebSocketServer({ host: "127.0.0.1", port: 0, maxPayload: MAX_WS_MESSAGE_BYTES })
    await new Promise((resolve) => server.once("listening", resolve))
    const taken: Array<Duplex> = []
    const both = new Promise<void>((resolve) =>
      server.on("connection", (ws) => {
        wsWireSocket(ws, { onText: () => {}, onClose: () => {} })
        taken.push((ws as unknown as { _socket: Duplex })._socket)
        if (taken.length === 2) resolve()
      })
    )
    const url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`
    const clients = [new WebSocket(url), new WebSocket(url)]
    try {
      await Promise.all([both, ...clients.map((client) => new Promise((resolve) => client.once("open", resolve)))])
      const [read, unread] = taken as [Duplex & { remoteAddress?: string }, Duplex]
      expect(read.remoteAddress).toBe("127.0.0.1")
      const keys = (socket: Duplex) => Reflect.ownKeys(socket).map(String)
      expect(keys(read)).toContain("push")
      expect(keys(read)).toContain("pause")
      expect(keys(unread)).toEqual(keys(read))
    } finally {
      for (const client of clients) client.terminate()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })
})

describe("WsFrameReader reading into its shared buffer over a real socket", () => {
  it("reads each TCP read into the one shared buffer; texts sent while the socket is paused wait in order, and after resume all arrive", async () => {
    const server = new WebSocketServer({ host: "127.0.0.1", port: 0, maxPayload: MAX_WS_MESSAGE_BYTES })
    await new Promise((resolve) => server.once("listening", resolve))
    const heard: Array<string> = []
    let onHeard = () => {}
    const accepted = new Promise<WebSocket>((resolve) =>
      server.once("connection", (ws) => {
        ws.on("message", () => {})
        expect(
          readFramesOf(ws, (text) => {
            heard.push(text)
            onHeard()
          })
        ).toBe(true)
        resolve(ws)
      })
    )
    const client = new WebSocket(`ws://127.0.0.1:${(server.address() as AddressInfo).port}`)
    try {
      await new Promise((resolve) => client.once("open", resolve))
      const ws = await accepted
      const socket = (ws as unknown as { _socket: Duplex })._socket
      // Node's own slot for the buffer reads land in holds the reader's 64 KB buffer, the same for every socket.
      const readInto = (socket as unknown as Record<symbol, unknown>)[slotOf(socket, "kBuffer")]
      expect(Buffer.isBuffer(readInto) && readInto.length).toBe(64 * 1024)
      const received = (count: number) =>
        new Promise<void>((resolve) => {
          onHeard = () => {
            if (heard.length >= count) resolve()
          }
          onHeard()
        })
      const text = (i: number) => `{"event":"media","n":${i},"payload":"${"A".repeat(160 + (i % 97))}"}`
      for (let i = 0; i < 100; i++) client.send(text(i))
      await received(100)
      // Paused: the socket reads on into its stream until it is full, then stops; nothing reaches the reader.
      ws.pause()
      const paused = heard.length
      const drained = new Promise<void>((resolve) => client.send(text(100), () => resolve()))
      for (let i = 101; i < 1100; i++) client.send(text(i))
      await drained
      expect(heard.length).toBe(paused)
      ws.resume()
      await received(1100)
      expect(heard).toEqual(Array.from({ length: 1100 }, (_, i) => text(i)))
    } finally {
      client.terminate()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })
})
