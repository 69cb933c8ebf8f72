import { describe, expect, it } from "vitest"
import type { AgentEvents, AgentLink, AgentStart, CarrierLeg } from "../../src/kernel/CallLegs.js"
import { unwatched } from "../../src/livecall/CallTurns.js"
import { LiveCall } from "../../src/livecall/LiveCall.js"
import type { SessionInfo } from "../../src/kernel/SessionInfo.js"
import { nullTurnObserver, type TurnObserver } from "../../src/turns/TurnObserver.js"

const info: SessionInfo = {
  sessionId: "ses_1",
  agentId: "agent",
  environmentId: "env",
  provider: "twilio",
  call: { kind: "twilio", callId: "CA1" },
  from: "+14155550100",
  to: "+14155550111",
  direction: "inbound",
  streamSid: "MZ00000000000000000000000000000000",
  createdAt: new Date()
}
const start: AgentStart = { ...info, from: info.from!, to: info.to!, streamSid: "MZ1", answeredBy: undefined }

const carrier = () => {
  const sent: Array<string> = []
  const leg: CarrierLeg = {
    sendMedia: (p) => void sent.push(`media:${p}`),
    sendMark: (n) => void sent.push(`mark:${n}`),
    sendClear: () => void sent.push("clear"),
    close: (code) => void sent.push(`close:${code}`),
    bind: () => {}
  }
  return { leg, sent }
}

const agent = (backlog = 0) => {
  const sent: Array<string> = []
  let events: AgentEvents | undefined
  const link: AgentLink & { backlog: number } = {
    begin: (start, e) => {
      events = e
      sent.push("connected", start.answeredBy !== undefined ? `start:${start.answeredBy}` : "start")
    },
    sendAmd: (v) => void sent.push(`amd:${v.answeredBy}:${v.detail}`),
    sendResume: (r) => void sent.push(`resume:${r.previousEndReason}`),
    sendMedia: (p) => void sent.push(`media:${p}`),
    sendDtmf: (d) => void sent.push(`dtmf:${d}`),
    sendMark: (n) => void sent.push(`mark:${n}`),
    finish: (code) => void sent.push(`finish:${code}`),
    backlog
  }
  return { link, sent, events: () => events! }
}

const session = () => {
  const c = carrier()
  const relay = new LiveCall(info, c.leg, { maxHeldFrames: 3, maxAgentBacklogBytes: 1000 })
  return { relay, carrier: c }
}

const frame = (byte: number) => Buffer.alloc(160, byte).toString("base64")

describe("LiveCall (the synchronous relay)", () => {
  it("holds caller frames and DTMF until the agent is attached, then sends them in order", () => {
    const { relay } = session()
    relay.callerMedia(frame(1))
    relay.callerDtmf("3")
    relay.callerMedia(frame(2))
    const a = agent()
    relay.attachAgent(a.link, start)
    relay.callerMedia(frame(4))
    expect(a.sent).toEqual(["connected", "start", `media:${frame(1)}`, "dtmf:3", `media:${frame(2)}`, `media:${frame(4)}`])
  })

  it("a machine verdict before the agent is attached rides in start; after, it is an amd message; the first stands", () => {
    const early = session()
    early.relay.machineVerdict({ answeredBy: "machine", detail: "machine_end_beep" })
    const a = agent()
    early.relay.attachAgent(a.link, start)
    early.relay.machineVerdict({ answeredBy: "human", detail: "human" })
    expect(a.sent).toEqual(["connected", "start:machine"])
    expect(early.relay.answeredBy).toEqual({ answeredBy: "machine", detail: "machine_end_beep" })

    const late = session()
    const b = agent()
    late.relay.attachAgent(b.link, start)
    late.relay.machineVerdict({ answeredBy: "human", detail: "human" })
    late.relay.machineVerdict({ answeredBy: "machine", detail: "machine_start" })
    expect(b.sent).toEqual(["connected", "start", "amd:human:human"])
  })

  it("holds at most maxHeldFrames and counts what it dropped", () => {
    const { relay } = session()
    for (let n = 0; n < 5; n++) relay.callerMedia(frame(n))
    expect(relay.droppedFrames).toBe(2)
  })

  it("relays agent media, marks and clear to the carrier, and carrier marks back", () => {
    const { relay, carrier: c } = session()
    const a = agent()
    relay.attachAgent(a.link, start)
    a.events().agentMedia(frame(9))
    a.events().agentMark("m")
    a.events().agentClear()
    relay.carrierMark("m")
    expect(c.sent).toEqual([`media:${frame(9)}`, "mark:m", "clear"])
    expect(a.sent.slice(2)).toEqual(["mark:m"])
  })

  it("ends exactly once: the first ending stands and later events are ignored", () => {
    const { relay, carrier: c } = session()
    const a = agent()
    relay.attachAgent(a.link, start)
    a.events().agentHangup()
    relay.carrierStopped()
    a.events().agentFailed({ kind: "agent_error", message: "late" })
    expect(relay.ended).toMatchObject({ _tag: "Completed", reason: "agent_hangup" })
    relay.callerMedia(frame(1))
    a.events().agentMedia(frame(2))
    expect(a.sent).toEqual(["connected", "start"])
    expect(c.sent).toEqual([])
  })

  it("a carrier fault is a hard error carrying its kind and message", () => {
    const { relay } = session()
    relay.carrierGone({ kind: "carrier_stream_error", message: "reset" })
    expect(relay.ended).toMatchObject({ _tag: "Failed", error: { kind: "carrier_stream_error", message: "reset" } })
  })

  it("an agent attached after the end is released at once", () => {
    const { relay } = session()
    relay.carrierStopped()
    const a = agent()
    relay.attachAgent(a.link, start)
    expect(a.sent).toEqual(["finish:1000"])
  })

  it("an agent that stops reading fails the call (backpressure)", () => {
    const { relay } = session()
    relay.attachAgent(agent(5000).link, start)
    relay.callerMedia(frame(1))
    expect(relay.ended).toMatchObject({ _tag: "Failed", error: { kind: "agent_backpressure" } })
  })

  it("gives the observer decoded bytes, survives an observer that throws, and closes it once", () => {
    const { relay } = session()
    const seen: Array<number> = []
    let closes = 0
    let calls = 0
    const observer: TurnObserver = {
      ...nullTurnObserver,
      callerAudio: (bytes) => {
        calls++
        if (calls === 2) throw new Error("bug")
        seen.push(bytes.length, bytes[0]!)
      },
      callerDtmf: () => {},
      agentAudio: () => {},
      close: () => void closes++
    }
    relay.observeWith({ ...unwatched, observer })
    const a = agent()
    relay.attachAgent(a.link, start)
    relay.callerMedia(frame(7))
    relay.callerMedia(frame(8))
    relay.callerMedia(frame(9))
    expect(seen).toEqual([160, 7])
    expect(relay.observerFailure).toBeInstanceOf(Error)
    // The call went on.
    expect(a.sent.filter((s) => s.startsWith("media:"))).toHaveLength(3)
    // The throwing observer was closed when it was switched off, and only then.
    expect(closes).toBe(1)
    relay.release(1000, "done")
    expect(closes).toBe(1)
  })

  it("closes the observer exactly once at release", () => {
    const { relay } = session()
    let closes = 0
    relay.observeWith({ ...unwatched, observer: { ...nullTurnObserver, callerAudio: () => {}, callerDtmf: () => {}, agentAudio: () => {}, close: () => void closes++ } })
    relay.release(1000, "done")
    relay.release(1000, "done")
    expect(closes).toBe(1)
  })
})
