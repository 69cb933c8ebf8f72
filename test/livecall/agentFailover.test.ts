import { type ChildProcess, spawn } from "node:child_process"
import { createServer } from "node:http"
import { Effect, Option } from "effect"
import { SessionStore } from "../../src/sessions/SessionStore.js"
import { WebSocketServer } from "ws"
import { freePort } from "../support/redisServer.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { CallKind } from "../../src/kernel/Carrier.js"
import { repoRoot } from "../support/gatewayProcess.js"
import { ADMIN_KEY, uniqueId } from "../support/testApp.js"
import {
  audioFrames,
  type CarrierCall,
  dialInAgent,
  type Gateway,
  agentMedia as agentMediaOf,
  Peer,
  sessionIdOf,
  startGateway,
  storedSession,
  telnyxCall,
  twilioCall,
  until
} from "./callHarness.js"

/**
 * Agent failover end to end (docs/reliability.md, "Agent failover"): callgate as `src/main.ts`
 * wires it, carriers faked on loopback, agents as processes of their own (killed with SIGKILL) or
 * as sockets destroyed without a close handshake.
 */

const speech = audioFrames("caller-appointment.ulaw", 60)
const before = speech.slice(0, 10)
const gap = speech.slice(10, 40)
const after = speech.slice(40, 50)

/** A dial-in agent worker process (test/support/agentWorker.ts): what it received, parsed from its stdout. */
interface WorkerProcess {
  readonly child: ChildProcess
  readonly received: Array<any>
  readonly events: (event: string) => Array<any>
  readonly waitFor: (check: (received: Array<any>) => boolean, what: string) => Promise<void>
}

const spawnWorker = async (gateway: Gateway, agentId: string, environmentId: string, checkpoint?: object): Promise<WorkerProcess> => {
  const url = `${gateway.wsBase}/v1/agents/${agentId}/environments/${environmentId}/connect`
  const args = ["--import", "tsx", "test/support/agentWorker.ts", url, ADMIN_KEY, ...(checkpoint !== undefined ? [JSON.stringify(checkpoint)] : [])]
  const child = spawn(process.execPath, args, {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "inherit"]
  })
  const received: Array<any> = []
  let partial = ""
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
    const lines = (partial + chunk).split("\n")
    partial = lines.pop()!
    for (const line of lines) if (line.length > 0) received.push(JSON.parse(line))
  })
  const worker: WorkerProcess = {
    child,
    received,
    events: (event) => received.filter((m) => m.event === event),
    waitFor: (check, what) => until(() => check(received), what, 60_000)
  }
  await worker.waitFor((r) => r.some((m) => m.event === "open"), "the worker's socket to open")
  return worker
}

const placeCall = async (gateway: Gateway, kind: CallKind, agentId: string, environmentId: string): Promise<{ call: CarrierCall; callId: string }> => {
  const callId = kind === "twilio" ? `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}` : `v3:${uniqueId("cc")}`
  const token = gateway.issueToken({ agentId, environmentId, kind, callId })
  const call = kind === "twilio" ? await twilioCall(gateway, { token, callSid: callId }) : await telnyxCall(gateway, { token, callControlId: callId })
  call.start()
  return { call, callId }
}

/** Waits until the session's checkpoint is in the store. */
const checkpointStored = async (gateway: Gateway, agentId: string, sessionId: string) => {
  const deadline = Date.now() + 30_000
  while (Option.isNone(await gateway.run(Effect.flatMap(SessionStore, (store) => store.checkpointOf(agentId, sessionId))))) {
    if (Date.now() > deadline) throw new Error("timed out waiting for the checkpoint in the store")
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/** The caller audio an agent received, in order, with the timestamps it was given. */
const mediaOf = (received: Array<any>) => received.filter((m) => m.event === "media").map((m) => m.media.payload as string)
const timestampsOf = (received: Array<any>) => received.filter((m) => m.event === "media").map((m) => Number(m.media.timestamp))

/** The carrier requests a rescue would have made for the call (none must be made). */
const rescueRequests = (gateway: Gateway, kind: CallKind, callId: string) =>
  kind === "twilio" ? gateway.twilio.callUpdates(callId) : kind === "telnyx-texml" ? gateway.telnyx.texmlUpdates(callId) : gateway.telnyx.commands(callId).filter((r) => !r.path.includes("streaming"))

describe("agent failover", () => {
  let gateway: Gateway
  const workers: Array<WorkerProcess> = []
  beforeAll(async () => {
    gateway = await startGateway()
  })
  afterAll(async () => {
    for (const worker of workers) worker.child.kill("SIGKILL")
    await gateway.close()
  })

  it("Twilio: the worker process holding the call is SIGKILLed; the other worker gets start (resumed), resume, every gap frame in order; the call ends completed with agentFailovers 1 and no fallback", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { errorFallbackType: "phone", errorFallbackValue: "+14155550199" })
    const context = { step: "collect_date", slots: { party: 4 } }
    const first = await spawnWorker(gateway, agentId, env.id, context)
    workers.push(first)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "the first worker to be idle")
    const second = await spawnWorker(gateway, agentId, env.id)
    workers.push(second)
    await until(() => gateway.idleAgents(agentId, env.id) === 2, "both workers to be idle")

    const { call, callId } = await placeCall(gateway, "twilio", agentId, env.id)
    // The oldest idle socket takes the call.
    await first.waitFor((r) => r.some((m) => m.event === "start"), "the first worker's start")
    for (const frame of before) call.media(frame)
    await first.waitFor((r) => mediaOf(r).length === before.length, "the first frames at the first worker")
    const sessionId = first.events("start")[0].start.customParameters.sessionId
    // Its checkpoint is in the store before it dies.
    await checkpointStored(gateway, agentId, sessionId)

    first.child.kill("SIGKILL")
    // callgate saw the leg end: it clears the old agent's audio at the carrier.
    await call.peer.waitForEvent("clear")
    for (const frame of gap.slice(0, 5)) call.media(frame)
    call.dtmf("7")
    for (const frame of gap.slice(5)) call.media(frame)
    await second.waitFor((r) => mediaOf(r).length === gap.length, "the gap frames at the second worker")
    for (const frame of after) call.media(frame)
    await second.waitFor((r) => mediaOf(r).length === gap.length + after.length, "the live frames at the second worker")

    const start = second.events("start")[0].start
    expect(start.callSid).toBe(first.events("start")[0].start.callSid)
    expect(start.accountSid).toBe(first.events("start")[0].start.accountSid)
    expect(start.customParameters).toMatchObject({ sessionId, resumed: "true", failover: "1" })
    const events = second.received.map((m) => m.event).filter((e) => e !== "open")
    expect(events.slice(0, 3)).toEqual(["connected", "start", "resume"])
    const resume = second.events("resume")[0].resume
    expect(resume).toMatchObject({ checkpoint: context, previousEndReason: "agent_disconnected" })
    expect(Array.isArray(resume.turns)).toBe(true)
    expect(resume.heldAudioMs).toBeGreaterThanOrEqual(0)
    // Every caller frame and digit after the leg ended, in order, then live audio.
    expect(mediaOf(second.received)).toEqual([...gap, ...after])
    expect(second.events("dtmf").map((m) => m.dtmf.digit)).toEqual(["7"])
    const stamps = timestampsOf(second.received)
    expect([...stamps].sort((a, b) => a - b)).toEqual(stamps)
    expect(stamps[0]!).toBeGreaterThan(Math.max(...timestampsOf(first.received)))

    call.stop()
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "completed", endReason: "caller_hangup", agentFailovers: 1 })
    expect(rescueRequests(gateway, "twilio", callId)).toEqual([])
    const record = await storedSession(gateway, agentId, sessionId)
    expect(record.agentFailovers).toBe(1)
    expect(record.agentLegs?.map((leg) => leg.endReason)).toEqual(["agent_disconnected", "caller_hangup"])
  })

  it.each(["twilio", "telnyx-texml", "telnyx-call-control"] as const)(
    "%s: the agent's socket vanishes while no other agent is idle; the caller hears comfort noise, audio is held, and a worker that connects within the timeout gets it all",
    async (kind) => {
      const agentId = uniqueId("agent")
      const env = await gateway.createEnvironment(agentId, { errorFallbackType: "phone", errorFallbackValue: "+14155550199", agentFailoverTimeout: 10 })
      const first = await dialInAgent(gateway, agentId, env.id)
      await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
      const { call, callId } = await placeCall(gateway, kind, agentId, env.id)
      await first.waitForEvent("start")
      const sessionId = sessionIdOf(first)
      for (const frame of before) call.media(frame)
      await first.waitForEvent("media", before.length)

      first.ws.terminate()
      await call.peer.waitForEvent("clear")
      for (const frame of gap) call.media(frame)
      // No dead air: comfort noise reaches the caller while no agent holds the call.
      await until(() => call.sentMedia().length >= 5, "comfort noise at the carrier")

      const second = await dialInAgent(gateway, agentId, env.id)
      await second.waitForEvent("media", gap.length)
      for (const frame of after) call.media(frame)
      await second.waitForEvent("media", gap.length + after.length)
      expect(second.received.map((m) => m.event).slice(0, 3)).toEqual(["connected", "start", "resume"])
      const resume = second.events("resume")[0].resume
      expect(resume.previousEndReason).toBe("agent_disconnected")
      // The gap frames were held: 30 frames of 20 ms.
      expect(resume.heldAudioMs).toBe(gap.length * 20)
      expect(second.events("media").map((m) => m.media.payload)).toEqual([...gap, ...after])

      call.stop()
      const ended = await gateway.outbox.forSession(sessionId)
      expect(ended).toMatchObject({ status: "completed", agentFailovers: 1 })
      expect(rescueRequests(gateway, kind, callId)).toEqual([])
      second.close()
    }
  )

  it("no agent within agentFailoverTimeout: the error fallback runs once, with the trigger it has today", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { errorFallbackType: "phone", errorFallbackValue: "+14155550199", agentFailoverTimeout: 1 })
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const { call, callId } = await placeCall(gateway, "twilio", agentId, env.id)
    await agent.waitForEvent("start")
    const sessionId = sessionIdOf(agent)
    agent.ws.terminate()
    await call.peer.waitForEvent("clear")
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_disconnected", agentFailovers: 1 })
    await until(() => gateway.twilio.callUpdates(callId).length === 1, "the fallback's call update")
    expect(gateway.twilio.callUpdates(callId)).toHaveLength(1)
  })

  it("agentFailoverTimeout 0 keeps today's behaviour: the fallback runs at once, even with another agent idle", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { errorFallbackType: "phone", errorFallbackValue: "+14155550199", agentFailoverTimeout: 0 })
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const idle = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 2, "two idle agents")
    const { callId } = await placeCall(gateway, "twilio", agentId, env.id)
    await agent.waitForEvent("start")
    const sessionId = sessionIdOf(agent)
    agent.ws.terminate()
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_disconnected", agentFailovers: 0 })
    await until(() => gateway.twilio.callUpdates(callId).length === 1, "the fallback's call update")
    expect(idle.events("start")).toEqual([])
    idle.close()
  })

  it("the caller hangs up during the hold: one ending, one session.ended, no fallback", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { errorFallbackType: "phone", errorFallbackValue: "+14155550199", agentFailoverTimeout: 30 })
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const { call, callId } = await placeCall(gateway, "twilio", agentId, env.id)
    await agent.waitForEvent("start")
    const sessionId = sessionIdOf(agent)
    agent.ws.terminate()
    await call.peer.waitForEvent("clear")
    call.stop()
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "completed", endReason: "caller_hangup", agentFailovers: 1 })
    await call.peer.waitClosed()
    // The session is over: an agent that connects now is not handed the call.
    const late = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "the late agent to stay idle")
    expect(gateway.outbox.events.filter((e) => e.sessionId === sessionId)).toHaveLength(1)
    expect(gateway.twilio.callUpdates(callId)).toEqual([])
    expect(late.events("start")).toEqual([])
    late.close()
  })

  it("an agent `error` event fails over; a clean close (1000) still ends the call", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const first = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const second = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 2, "two idle agents")
    const { call } = await placeCall(gateway, "twilio", agentId, env.id)
    await first.waitForEvent("start")
    const sessionId = sessionIdOf(first)
    first.send({ event: "error", error: { message: "model crashed" } })
    await second.waitForEvent("resume")
    expect(second.events("resume")[0].resume.previousEndReason).toBe("agent_error")
    // The old agent was told the call is over for it.
    await first.waitClosed()
    second.ws.close(1000)
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "completed", endReason: "agent_closed", agentFailovers: 1 })
    await call.peer.waitClosed()
  })

})

/** A dial-out agent server on a fixed port, which can die (its sockets destroyed) and come back. */
const agentServerOn = async (port: number) => {
  const server = createServer()
  const wss = new WebSocketServer({ server })
  const peers: Array<Peer> = []
  wss.on("connection", (ws) => peers.push(new Peer(ws)))
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve))
  return {
    peers,
    kill: () =>
      new Promise<void>((resolve) => {
        for (const client of wss.clients) client.terminate()
        wss.close()
        server.close(() => resolve())
      })
  }
}

describe("agent failover: dial-out", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: { AGENT_CONNECT_TIMEOUT: "500ms", AGENT_ALLOW_PRIVATE_NETWORKS: "true" } })
  })
  afterAll(() => gateway.close())

  it("the agent server dies mid-call and comes back within the timeout: callgate dials again and the new connection gets start, resume and the held audio", async () => {
    const agentId = uniqueId("agent")
    const port = await freePort()
    let server = await agentServerOn(port)
    const env = await gateway.createEnvironment(agentId, { agentUrl: `ws://127.0.0.1:${port}/agent`, agentFailoverTimeout: 10 })
    const { call, callId } = await placeCall(gateway, "twilio", agentId, env.id)
    await until(() => server.peers.length === 1, "the dial-out connection")
    const first = server.peers[0]!
    await first.waitForEvent("start")
    const sessionId = sessionIdOf(first)
    for (const frame of before) call.media(frame)
    await first.waitForEvent("media", before.length)

    await server.kill()
    await call.peer.waitForEvent("clear")
    for (const frame of gap) call.media(frame)
    server = await agentServerOn(port)
    await until(() => server.peers.length === 1, "callgate to dial again")
    const second = server.peers[0]!
    await second.waitForEvent("media", gap.length)
    expect(second.received.map((m) => m.event).slice(0, 3)).toEqual(["connected", "start", "resume"])
    expect(second.events("start")[0].start.customParameters).toMatchObject({ sessionId, resumed: "true", failover: "1" })
    expect(agentMediaOf(second)).toEqual(gap)

    call.stop()
    expect(await gateway.outbox.forSession(sessionId)).toMatchObject({ status: "completed", agentFailovers: 1 })
    expect(gateway.twilio.callUpdates(callId)).toEqual([])
    await server.kill()
  })
})
