import { readdirSync } from "node:fs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  audioFrames,
  dialInAgent,
  type Gateway,
  openSocket,
  type Peer,
  startGateway,
  storedSession,
  telnyxCall,
  twilioCall,
  until
} from "../livecall/callHarness.js"
import { uniqueId } from "../support/testApp.js"

const frames = audioFrames("caller-appointment-noisy.ulaw", 20)
const openFds = () => readdirSync("/proc/self/fd").length
const callSid = () => `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`

describe("liveness: sockets that never authenticate, go silent or stop reading", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({
      env: {
        HANDSHAKE_TIMEOUT: "1s",
        CARRIER_IDLE_TIMEOUT: "1s",
        // The agent in the backlog test sends big frames fast: the rate limit is another test's subject.
        SOCKET_MESSAGE_RATE: "100000",
        SOCKET_MESSAGE_BURST: "100000"
      }
    })
  })
  afterAll(() => gateway.close())

  it("500 stream sockets that never authenticate are all closed with 1008, file descriptors back to baseline", async () => {
    const baseline = openFds()
    const peers: Array<Peer> = []
    const started = Date.now()
    for (let batch = 0; batch < 10; batch++) {
      const opened = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          (batch * 50 + i) % 10 === 0
            ? // Telnyx sockets authenticate on the URL but still owe a `start`.
              telnyxCall(gateway, {
                token: gateway.issueToken({ agentId: "a", environmentId: "e", kind: "telnyx-call-control", callId: uniqueId("v") }),
                callControlId: uniqueId("v")
              }).then((call) => call.peer)
            : openSocket(`${gateway.wsBase}/telephony/twilio/stream`, { "X-Twilio-Signature": gateway.twilio.sign(gateway.signedStreamUrl("twilio")) })
        )
      )
      peers.push(...opened)
    }
    const closes = await Promise.all(peers.map((peer) => peer.done))
    const lastClosedAfterMs = Date.now() - started
    expect(closes.every((c) => c.code === 1008)).toBe(true)
    expect(new Set(closes.map((c) => c.reason.replace(/\d+/g, "N")))).toEqual(new Set(["not authenticated within N ms"]))
    await until(() => openFds() <= baseline, `file descriptors back to ${baseline} (now ${openFds()})`, 30_000)
    console.log(`500 unauthenticated sockets: last one closed ${lastClosedAfterMs} ms after the first opened (HANDSHAKE_TIMEOUT 1s); fds ${baseline} -> ${openFds()}`)
  })

  it("`connected` may come once", async () => {
    const peer = await openSocket(`${gateway.wsBase}/telephony/twilio/stream`, { "X-Twilio-Signature": gateway.twilio.sign(gateway.signedStreamUrl("twilio")) })
    peer.send({ event: "connected", protocol: "Call", version: "1.0.0" })
    peer.send({ event: "connected", protocol: "Call", version: "1.0.0" })
    expect(await peer.done).toMatchObject({ code: 1008, reason: "twilio: second connected frame" })
  })

  it("a carrier stream that goes silent (TCP left open) is a hard stream error after CARRIER_IDLE_TIMEOUT: the fallback runs", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "the agent in the pool")
    const sid = callSid()
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: sid }), callSid: sid })
    call.start()
    for (const frame of frames) call.media(frame)
    await agent.waitForEvent("media", frames.length)
    // From here the carrier sends nothing and keeps its socket open.
    await until(() => gateway.outbox.events.some((e) => e.callId === sid), "session.ended", 30_000)
    const ended = gateway.outbox.events.find((e) => e.callId === sid)!
    expect(ended).toMatchObject({ status: "failed", endReason: "carrier_stream_error" })
    const session: any = await storedSession(gateway, agentId, ended.sessionId)
    expect(session.fallback).toMatchObject({ trigger: "carrier_stream_error", outcome: "hung_up" })
    expect(session.fallback.errorMessage).toMatch(/no frame for 1000 ms/)
    expect(gateway.twilio.callUpdates(sid)[0]!.form).toEqual({ Status: "completed" })
    // The agent socket is released too.
    await agent.done
    expect(call.peer.closed?.code ?? (await call.peer.done).code).toBe(1008)
  })

  it("a carrier that stops reading is cut once the queue towards it passes the cap: a hard error, memory bounded", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "the agent in the pool")
    const sid = callSid()
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: sid }), callSid: sid })
    call.start()
    await agent.waitForEvent("start")
    const streamSid = agent.events("start")[0].start.streamSid
    // The carrier stops reading; it keeps sending media so the idle limit is not what ends the call.
    ;(call.peer.ws as any)._socket.pause()
    const keepAlive = setInterval(() => call.media(frames[0]!), 100)
    const big = Buffer.alloc(44_000, 0x7f).toString("base64")
    let sent = 0
    while (!gateway.outbox.events.some((e) => e.callId === sid) && agent.ws.readyState === agent.ws.OPEN && sent < 2000) {
      agent.send({ event: "media", streamSid, media: { payload: big } })
      sent++
      if (sent % 20 === 0) await new Promise((resolve) => setImmediate(resolve))
    }
    await until(() => gateway.outbox.events.some((e) => e.callId === sid), "session.ended", 30_000)
    clearInterval(keepAlive)
    const ended = gateway.outbox.events.find((e) => e.callId === sid)!
    expect(ended).toMatchObject({ status: "failed", endReason: "carrier_stream_error" })
    const session: any = await storedSession(gateway, agentId, ended.sessionId)
    expect(session.fallback.errorMessage).toMatch(/stopped reading/)
    console.log(`carrier stopped reading: cut after the agent sent ${sent} frames of ${big.length} chars (${((sent * big.length) / 1048576).toFixed(1)} MiB)`)
  })
})
