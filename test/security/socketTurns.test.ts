import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { WebSocket, WebSocketServer } from "ws"
import { MESSAGES_PER_TURN, SocketGate, TurnClock } from "../../src/websocket/SocketGate.js"
import type { WireListener } from "../../src/frames/WireSocket.js"
import { wsWireSocket } from "../../src/websocket/WsWireSocket.js"
import { until } from "../livecall/callHarness.js"

/**
 * Per-socket fairness (docs/security.md, "Per-socket limits"): a socket gets at most
 * MESSAGES_PER_TURN messages handled per event-loop turn, so a burst is spread over turns and
 * other sockets' frames are handled in between. Real `ws` sockets over loopback into the adapter
 * callgate uses for every media stream and agent socket. The adapter's turn is one callback of the
 * event loop (one read); the test counts whole turns of the loop (one setImmediate per turn), the
 * coarser unit, so the budget holds for both. Only order and counts are asserted, never durations.
 */

/** This process's event-loop turns, numbered: a turn ends at the check phase after it began. */
let turn = 0
let advancing = false
const currentTurn = () => {
  if (!advancing) {
    advancing = true
    setImmediate(() => {
      advancing = false
      turn++
    })
  }
  return turn
}

interface Handled {
  readonly socket: string
  readonly text: string
  readonly turn: number
}

describe("at most MESSAGES_PER_TURN messages of one socket per event-loop turn", () => {
  let server: WebSocketServer
  let url: string
  const handled: Array<Handled> = []
  const closedAfter = new Map<string, number>()
  /** Called when the server handles a message, so a test can act at that very point. */
  let onHandled: (entry: Handled) => void = () => {}

  beforeAll(async () => {
    server = new WebSocketServer({ host: "127.0.0.1", port: 0 })
    await new Promise((resolve) => server.once("listening", resolve))
    url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`
    server.on("connection", (ws, request) => {
      const name = new URL(request.url ?? "/", "http://x").searchParams.get("name") ?? "?"
      const listener: WireListener = {
        onText: (text) => {
          const entry = { socket: name, text, turn: currentTurn() }
          handled.push(entry)
          onHandled(entry)
        },
        onClose: () => void closedAfter.set(name, handled.filter((h) => h.socket === name).length)
      }
      // A gate well above the burst, as production sockets have (its rate limit is tested in flood.test.ts).
      wsWireSocket(ws, listener, new SocketGate({ rate: 10_000, burst: 10_000 }, 0))
    })
  })
  afterAll(async () => {
    for (const client of server.clients) client.terminate()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })

  const open = async (name: string) => {
    const ws = new WebSocket(`${url}/?name=${name}`)
    await new Promise((resolve, reject) => {
      ws.once("open", resolve)
      ws.once("error", reject)
    })
    return ws
  }

  const of = (name: string) => handled.filter((h) => h.socket === name)

  it("a burst of 400 messages is handled in order over many turns, 16 a turn, while another socket's frames are handled in between", async () => {
    const flooder = await open("flooder")
    const bystander = await open("bystander")
    const BURST = 400
    const BYSTANDER_FRAMES = 5
    // Once the flood is being handled past its first turn, the bystander sends a frame each time
    // another of its frames is handled: each has to be read while the burst is still waiting.
    let bystanderSent = 0
    onHandled = (entry) => {
      const floodIndex = entry.socket === "flooder" ? Number(entry.text.slice(2)) : -1
      if ((floodIndex === MESSAGES_PER_TURN && bystanderSent === 0) || (entry.socket === "bystander" && bystanderSent < BYSTANDER_FRAMES)) {
        bystander.send(`b:${bystanderSent++}`)
      }
    }
    // The whole burst written at once, as a flooding peer does.
    for (let i = 0; i < BURST; i++) flooder.send(`f:${i}`)

    await until(() => of("flooder").length === BURST && of("bystander").length === BYSTANDER_FRAMES, "every frame of both sockets handled", 20_000)
    onHandled = () => {}

    // Every frame of each socket, in order.
    expect(of("flooder").map((h) => h.text)).toEqual(Array.from({ length: BURST }, (_, i) => `f:${i}`))
    expect(of("bystander").map((h) => h.text)).toEqual(Array.from({ length: BYSTANDER_FRAMES }, (_, i) => `b:${i}`))

    // The burst spread over turns: callgate handles at most MESSAGES_PER_TURN of it per turn of
    // its own clock (one callback); what waits is handed over in the check phase, where this
    // test's clock also ticks, on either side of callgate's batch: one of the test's turns can
    // hold two of callgate's.
    const perTurn = new Map<number, number>()
    for (const h of of("flooder")) perTurn.set(h.turn, (perTurn.get(h.turn) ?? 0) + 1)
    expect(Math.max(...perTurn.values())).toBeLessThanOrEqual(2 * MESSAGES_PER_TURN)
    expect(perTurn.size).toBeGreaterThanOrEqual(Math.ceil(BURST / (2 * MESSAGES_PER_TURN)))

    // Interleaved: every bystander frame was handled before the burst's last frame, each with
    // flood frames before and after it.
    const lastFlood = handled.findIndex((h) => h.text === `f:${BURST - 1}`)
    const firstFlood = handled.findIndex((h) => h.text === "f:0")
    for (let i = 0; i < BYSTANDER_FRAMES; i++) {
      const at = handled.findIndex((h) => h.text === `b:${i}`)
      expect(at).toBeGreaterThan(firstFlood)
      expect(at).toBeLessThan(lastFlood)
    }
    flooder.close()
    bystander.close()
  })

  it("a socket that closes with a burst still waiting has every message handled before its close", async () => {
    const burster = await open("closer")
    const BURST = 200
    for (let i = 0; i < BURST; i++) burster.send(`c:${i}`)
    burster.close(1000)
    await until(() => closedAfter.has("closer"), "the close", 20_000)
    expect(closedAfter.get("closer")).toBe(BURST)
    expect(of("closer").map((h) => h.text)).toEqual(Array.from({ length: BURST }, (_, i) => `c:${i}`))
  })

  it("a binary message waiting its turn is refused in its place: what came before it is handled, the socket closed with 1003", async () => {
    const peer = await open("binary")
    const closed = new Promise<number>((resolve) => peer.once("close", (code) => resolve(code)))
    for (let i = 0; i < 40; i++) peer.send(`x:${i}`)
    peer.send(Buffer.from([1, 2, 3]))
    expect(await closed).toBe(1003)
    expect(of("binary").slice(0, 40).map((h) => h.text)).toEqual(Array.from({ length: 40 }, (_, i) => `x:${i}`))
  })
})

describe("TurnClock", () => {
  it("a turn is one callback: touches within it share a number, the next callback gets the next; waiting tasks run in a later macrotask", async () => {
    const clock = new TurnClock(
      (advance) => void Promise.resolve().then(advance),
      (run) => void setImmediate(run)
    )
    const first = clock.touch()
    expect(clock.touch()).toBe(first)
    await new Promise<void>((resolve) => setImmediate(resolve))
    const second = clock.touch()
    expect(second).toBe(first + 1)

    const order: Array<string> = []
    clock.later(() => order.push("later 1"))
    clock.later(() => order.push(`later 2, turn ${clock.touch()}`))
    void Promise.resolve().then(() => order.push("microtask"))
    await new Promise<void>((resolve) => setImmediate(resolve))
    // Both waiting tasks ran together, after the microtasks, in a turn after the one they were queued in.
    expect(order).toEqual(["microtask", "later 1", `later 2, turn ${second + 1}`])
  })
})
