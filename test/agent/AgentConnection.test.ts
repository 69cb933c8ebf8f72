import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { describe, expect, it } from "vitest"
import { AgentConnection } from "../../src/agent/AgentConnection.js"
import { type AgentEvents, type AgentStart, type LegFault, MAX_CHECKPOINT_BYTES } from "../../src/kernel/CallLegs.js"
import type { WireListener, WireSocket } from "../../src/frames/WireSocket.js"

const fakeSocket = () => {
  const sent: Array<string> = []
  const closes: Array<[number, string]> = []
  let listener: WireListener | undefined
  let open = true
  const socket: WireSocket = {
    send: (text) => void (open && sent.push(text)),
    sendAscii: (text) => void (open && sent.push(text)),
    close: (code, reason) => {
      closes.push([code, reason])
      open = false
    },
    listen: (next) => void (listener = next),
    get isOpen() {
      return open
    },
    bufferedAmount: 0,
    heartbeat: () => open
  }
  return {
    socket,
    sent,
    closes,
    deliver: (text: string) => listener!.onText(text),
    drop: (fault?: string) => {
      open = false
      listener!.onClose(1006, "", fault)
    },
    closedByPeer: (code: number) => {
      open = false
      listener!.onClose(code, "", undefined)
    }
  }
}

const start: AgentStart = {
  sessionId: "ses_1",
  agentId: "agent_1",
  environmentId: "env_1",
  from: "+14155550100",
  to: "+14155550111",
  direction: "inbound",
  provider: "telnyx",
  streamSid: "MZ1"
}

const recorder = () => {
  const seen: Array<string> = []
  const faults: Array<LegFault> = []
  const events: AgentEvents = {
    agentMedia: (p) => void seen.push(`media:${p}`),
    agentMark: (n) => void seen.push(`mark:${n}`),
    agentClear: () => void seen.push("clear"),
    agentHangup: () => void seen.push("hangup"),
    agentClosed: () => void seen.push("closed"),
    agentTransfer: (to) => void seen.push(`transfer:${to}`),
    agentFailed: (fault) => void faults.push(fault)
  }
  return { events, seen, faults }
}

describe("AgentConnection", () => {
  it("ignores whatever an idle agent sends, and tells the pool when it goes away", () => {
    const wire = fakeSocket()
    const connection = new AgentConnection(wire.socket)
    let forgotten = 0
    connection.onIdleClose = () => void forgotten++
    wire.deliver("garbage")
    wire.deliver(JSON.stringify({ event: "hangup" }))
    expect(wire.closes).toEqual([])
    wire.drop()
    expect(forgotten).toBe(1)
    expect(connection.isIdle).toBe(false)
  })

  it("begins with connected and start, then maps the agent's messages", () => {
    const wire = fakeSocket()
    const connection = new AgentConnection(wire.socket)
    const { events, seen, faults } = recorder()
    connection.begin(start, events)
    expect(JSON.parse(wire.sent[0]!).event).toBe("connected")
    expect(JSON.parse(wire.sent[1]!).start.customParameters).toEqual({
      sessionId: "ses_1",
      agentId: "agent_1",
      environmentId: "env_1",
      from: "+14155550100",
      to: "+14155550111",
      from_number: "+14155550100",
      to_number: "+14155550111",
      direction: "inbound",
      provider: "telnyx"
    })
    for (const message of [
      { event: "media", media: { payload: "AAAA" } },
      { event: "mark", mark: { name: "m" } },
      { event: "clear" },
      { event: "transfer", transfer: { to: "+14155550123" } },
      { event: "hangup" }
    ]) {
      wire.deliver(JSON.stringify(message))
    }
    expect(seen).toEqual(["media:AAAA", "mark:m", "clear", "transfer:+14155550123", "hangup"])
    wire.deliver(JSON.stringify({ event: "error", error: { message: "out of credit" } }))
    expect(faults).toEqual([{ kind: "agent_error", message: "The agent reported an error: out of credit" }])
  })

  it("the entry URL's custom parameters and an outbound call's metadata come first: callgate's own names win", () => {
    const wire = fakeSocket()
    new AgentConnection(wire.socket).begin(
      { ...start, customParameters: { lang: "es", from: "+10000000000", crm: "entry" }, metadata: { crm: "placer", to_number: "+10000000001" } },
      recorder().events
    )
    expect(JSON.parse(wire.sent[1]!).start.customParameters).toMatchObject({
      lang: "es",
      crm: "placer",
      from: "+14155550100",
      from_number: "+14155550100",
      to_number: "+14155550111"
    })
  })

  it("finish sends stop and closes; a drop during the call is a fault", () => {
    const wire = fakeSocket()
    const connection = new AgentConnection(wire.socket)
    const { events, faults } = recorder()
    connection.begin(start, events)
    wire.drop("read ECONNRESET")
    expect(faults).toEqual([{ kind: "agent_disconnected", message: "The agent connection failed: read ECONNRESET" }])

    const second = fakeSocket()
    const other = new AgentConnection(second.socket)
    other.begin(start, recorder().events)
    other.finish(1000, "the call ended")
    other.finish(1000, "the call ended")
    expect(second.sent.map((s) => JSON.parse(s).event)).toEqual(["connected", "start", "stop"])
  })

  it("a close handshake with 1000 during the call is an ending; any other code is a fault", () => {
    const clean = fakeSocket()
    const first = recorder()
    new AgentConnection(clean.socket).begin(start, first.events)
    clean.closedByPeer(1000)
    expect(first.seen).toEqual(["closed"])
    expect(first.faults).toEqual([])

    for (const code of [1001, 1006, 1011]) {
      const wire = fakeSocket()
      const { events, seen, faults } = recorder()
      new AgentConnection(wire.socket).begin(start, events)
      wire.closedByPeer(code)
      expect(seen).toEqual([])
      expect(faults).toEqual([{ kind: "agent_disconnected", message: `The agent closed its connection during the call (code ${code})` }])
    }
  })

  it("a connection that closed before its call began fails the call instead of hanging it", () => {
    const wire = fakeSocket()
    const connection = new AgentConnection(wire.socket)
    wire.drop()
    const { events, faults } = recorder()
    connection.begin(start, events)
    expect(faults).toEqual([{ kind: "agent_disconnected", message: "The agent connection closed before the call began." }])
    expect(wire.sent).toEqual([])
  })

  it("a checkpoint (a JSON object up to 16 KiB serialized) reaches the call; anything else gets error back and the call goes on", () => {
    const wire = fakeSocket()
    const { events, seen, faults } = recorder()
    const kept: Array<unknown> = []
    new AgentConnection(wire.socket).begin(start, { ...events, agentCheckpoint: (checkpoint) => void kept.push(checkpoint) })
    const sentBefore = wire.sent.length
    // `{"notes":""}` is 12 bytes; "é" is 2 bytes of UTF-8.
    const fits = { notes: "é".repeat((MAX_CHECKPOINT_BYTES - 12) / 2) }
    expect(Buffer.byteLength(JSON.stringify(fits))).toBe(MAX_CHECKPOINT_BYTES)
    wire.deliver(JSON.stringify({ event: "checkpoint", checkpoint: { step: 3, slots: { party: 4 } } }))
    wire.deliver(JSON.stringify({ event: "checkpoint", streamSid: "MZ1", checkpoint: fits }))
    expect(kept).toEqual([{ step: 3, slots: { party: 4 } }, fits])
    expect(wire.sent.length).toBe(sentBefore)

    const tooLarge = { notes: `${fits.notes}x` }
    for (const checkpoint of [tooLarge, [1, 2], "step 3", null, 42]) wire.deliver(JSON.stringify({ event: "checkpoint", checkpoint }))
    wire.deliver(JSON.stringify({ event: "checkpoint" }))
    const errors = wire.sent.slice(sentBefore).map((text) => JSON.parse(text))
    const shape = 'invalid checkpoint: expected {"event":"checkpoint","checkpoint":{...}} with a JSON object'
    expect(errors).toEqual([
      { event: "error", error: { message: `invalid checkpoint: the checkpoint takes ${MAX_CHECKPOINT_BYTES + 1} bytes serialized, more than ${MAX_CHECKPOINT_BYTES}` } },
      ...Array.from({ length: 5 }, () => ({ event: "error", error: { message: shape } }))
    ])
    expect(kept).toHaveLength(2)
    // The call goes on: nothing closed, nothing failed, the next message is relayed.
    expect(wire.closes).toEqual([])
    expect(faults).toEqual([])
    wire.deliver(JSON.stringify({ event: "media", media: { payload: "AAAA" } }))
    expect(seen).toEqual(["media:AAAA"])
  })

  it("lets go of its call once the call is over: the pool, which keeps pinging it until it sees it closed, does not keep the call alive", async () => {
    setFlagsFromString("--expose-gc")
    const gc = runInNewContext("gc") as () => void
    const ended = async (end: (connection: AgentConnection, wire: ReturnType<typeof fakeSocket>) => void) => {
      const wire = fakeSocket()
      const connection = new AgentConnection(wire.socket)
      // What the call owner is to its connection; the pool's set of connections to ping holds the connection.
      const call = new WeakRef(recorder().events)
      connection.begin(start, call.deref()!)
      end(connection, wire)
      const pinged = new Set([connection])
      // A collection runs after the current turn: let the call's last strong references go first.
      await new Promise((resolve) => setImmediate(resolve))
      gc()
      return { alive: call.deref() !== undefined, pinged: pinged.size }
    }
    expect(await ended((connection) => connection.finish(1000, "call ended"))).toEqual({ alive: false, pinged: 1 })
    expect(await ended((_, wire) => wire.closedByPeer(1000))).toEqual({ alive: false, pinged: 1 })
    expect(await ended((_, wire) => wire.drop("reset"))).toEqual({ alive: false, pinged: 1 })
  })
})
