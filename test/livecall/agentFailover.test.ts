import { type ChildProcess, spawn } from "node:child_process"
import { createServer } from "node:http"
import { Effect, Option } from "effect"
import { SessionStore } from "../../src/sessions/SessionStore.js"
import { WebSocketServer } from "ws"
import { freePort } from "../support/redisServer.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { CallKind } from "../../src/kernel/Carrier.js"
import { CheckpointAgent } from "../../examples/agents/checkpoint-agent.js"
import { completeTransfer, speakThenListen as speakThenListenOn } from "../fallback/liveCalls.js"
import { repoRoot } from "../support/gatewayProcess.js"
import { G722Decoder } from "../../src/audio/G722.js"
import { comfortNoiseFrames, G722_16K, MULAW_8K, payloadTranscoders } from "../../src/kernel/AudioFormat.js"
import { ADMIN_KEY, uniqueId } from "../support/testApp.js"
import {
  audioFrames,
  type CarrierCall,
  dialInAgent,
  g722Stream,
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

const spawnWorker = async (
  gateway: Gateway,
  agentId: string,
  environmentId: string,
  options: { readonly checkpoint?: object; readonly capacity?: number } = {}
): Promise<WorkerProcess> => {
  const url = `${gateway.wsBase}/v1/agents/${agentId}/environments/${environmentId}/connect`
  const capacity = options.capacity ?? 1
  const checkpoint = options.checkpoint !== undefined ? JSON.stringify(options.checkpoint) : "-"
  const child = spawn(process.execPath, ["--import", "tsx", "test/support/agentWorker.ts", url, ADMIN_KEY, checkpoint, String(capacity)], {
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
  await worker.waitFor((r) => r.filter((m) => m.event === "open").length === capacity, "the worker's sockets to open")
  return worker
}

const placeCall = async (gateway: Gateway, kind: CallKind, agentId: string, environmentId: string): Promise<{ call: CarrierCall; callId: string }> => {
  const callId = kind === "twilio" ? `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}` : `v3:${uniqueId("cc")}`
  const token = gateway.issueToken({ agentId, environmentId, kind, callId })
  const call = kind === "twilio" ? await twilioCall(gateway, { token, callSid: callId }) : await telnyxCall(gateway, { token, callControlId: callId })
  call.start()
  return { call, callId }
}

/** A caller turn of real speech, then silence at a live line's pace, until stopped. */
const speakThenListen = (call: CarrierCall, callId: string) => speakThenListenOn({ kind: "twilio", callId, carrier: call, agent: undefined })

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
    const first = await spawnWorker(gateway, agentId, env.id, { checkpoint: context })
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

  it("a G.722 call whose agent speaks mu-law (agentAudioFormat): a new agent in the same format keeps the call's transcoder pair, so the caller's audio it hears and its voice at the carrier go on from the codec state the first agent left, comfort noise included", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, {
      agentAudioFormat: "audio/x-mulaw;rate=8000",
      errorFallbackType: "phone",
      errorFallbackValue: "+14155550199",
      agentFailoverTimeout: 10
    })
    const first = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const callId = `v3:${uniqueId("cc")}`
    const token = gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId })
    const call = await telnyxCall(gateway, { token, callControlId: callId, encoding: "G722", sampleRate: 8000 })
    call.start()
    await first.waitForEvent("start")
    const sessionId = sessionIdOf(first)
    expect(first.events("start")[0].start.mediaFormat).toEqual({ encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 })

    // The caller's side: one G.722 stream; 20 frames reach the first agent, 20 are held, 20 go live to the second.
    const stream = g722Stream(audioFrames("caller-appointment.ulaw", 60))
    const [callerBefore, callerGap, callerAfter] = [stream.slice(0, 20), stream.slice(20, 40), stream.slice(40, 60)]
    // The agents' side: mu-law, 15 frames from each agent.
    const voice = audioFrames("agent-greeting.ulaw", 30)
    const [voiceBefore, voiceAfter] = [voice.slice(0, 15), voice.slice(15)]

    for (const frame of callerBefore) call.media(frame)
    await first.waitForEvent("media", callerBefore.length)
    for (const frame of voiceBefore) first.send({ event: "media", media: { payload: frame } })
    await until(() => call.sentMedia().length === voiceBefore.length, "the first agent's voice at the carrier")

    first.ws.terminate()
    await call.peer.waitForEvent("clear")
    for (const frame of callerGap) call.media(frame)
    // Comfort noise reaches the caller while no agent holds the call.
    await until(() => call.sentMedia().length >= voiceBefore.length + 5, "comfort noise at the carrier")
    const second = await dialInAgent(gateway, agentId, env.id)
    await second.waitForEvent("media", callerGap.length)
    expect(second.events("start")[0].start.mediaFormat).toEqual({ encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 })
    for (const frame of callerAfter) call.media(frame)
    await second.waitForEvent("media", callerGap.length + callerAfter.length)
    const noiseFrames = call.sentMedia().length - voiceBefore.length
    for (const frame of voiceAfter) second.send({ event: "media", media: { payload: frame } })
    await until(() => call.sentMedia().length === voiceBefore.length + noiseFrames + voiceAfter.length, "the second agent's voice at the carrier")

    // Caller to agents: one decoder over the whole stream, held frames in their place.
    const uninterrupted = payloadTranscoders(G722_16K, MULAW_8K)!
    const heard = stream.map((frame) => uninterrupted.toAgent(frame))
    expect(agentMediaOf(first), "the caller's audio at the first agent").toEqual(heard.slice(0, 20))
    expect(agentMediaOf(second), "the caller's audio at the second agent (held, then live), from the call's one decoder").toEqual(heard.slice(20))
    // What a fresh decoder would have given the second agent differs: the test can tell the two apart.
    const fresh = payloadTranscoders(G722_16K, MULAW_8K)!
    expect(stream.slice(20).map((frame) => fresh.toAgent(frame))).not.toEqual(heard.slice(20))

    // Agents to the caller: everything the carrier got (the first agent's voice, the comfort noise,
    // the second agent's voice) came out of one encoder in order, so the carrier's one decoder for
    // the stream stays in step with it.
    const noise = comfortNoiseFrames(MULAW_8K)
    const spoken = [...voiceBefore, ...Array.from({ length: noiseFrames }, (_, i) => noise[i % noise.length]!), ...voiceAfter]
    const encoder = payloadTranscoders(G722_16K, MULAW_8K)!
    const expected = spoken.map((frame) => encoder.toCarrier(frame))
    const sent = call.sentMedia()
    expect(sent.slice(0, voiceBefore.length), "the first agent's voice").toEqual(expected.slice(0, voiceBefore.length))
    expect(sent.slice(voiceBefore.length + noiseFrames), "the second agent's voice").toEqual(expected.slice(voiceBefore.length + noiseFrames))
    expect(sent.slice(voiceBefore.length, voiceBefore.length + noiseFrames), "the comfort noise").toEqual(expected.slice(voiceBefore.length, voiceBefore.length + noiseFrames))
    const restarted = payloadTranscoders(G722_16K, MULAW_8K)!
    expect(voiceAfter.map((frame) => restarted.toCarrier(frame))).not.toEqual(expected.slice(voiceBefore.length + noiseFrames))
    // As the carrier hears it: one G.722 decoder over the whole stream gives what the uninterrupted encoder's own decoder does.
    const decodeAll = (frames: ReadonlyArray<string>) => {
      const decoder = new G722Decoder()
      const pcm = new Int16Array(320)
      return frames.map((frame) => {
        decoder.decode(Buffer.from(frame, "base64"), 160, pcm)
        return Buffer.from(pcm.buffer.slice(0)).toString("base64")
      })
    }
    expect(decodeAll(sent), "the carrier's decoding of the whole stream").toEqual(decodeAll(expected))

    call.stop()
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "completed", agentFailovers: 1 })
    expect(rescueRequests(gateway, "telnyx-call-control", callId)).toEqual([])
    second.close()
  })

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
    // The phone fallback's session.ended waits for the transfer's outcome (docs/fallback.md, "Transfer outcomes").
    await completeTransfer(gateway, { kind: "twilio", callId }, agentId)
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
    await completeTransfer(gateway, { kind: "twilio", callId }, agentId)
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


  it("an agent that misses two response deadlines in a row while another is idle: the call moves to it, and both misses count for the breaker", async () => {
    const agentId = uniqueId("agent")
    // Threshold 5: two misses do not trip the breaker; the move is the failover's doing.
    const env = await gateway.createEnvironment(agentId, { errorFallbackTimeout: 1, errorFallbackOccurrenceThreshold: 5 })
    const stalled = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const { call, callId } = await placeCall(gateway, "twilio", agentId, env.id)
    await stalled.waitForEvent("start")
    const sessionId = sessionIdOf(stalled)
    const idle = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "another idle agent")
    // A caller turn of real speech, then a live line's silence; the agent says nothing.
    const stopTalking = speakThenListen(call, callId)
    try {
      await idle.waitForEvent("resume", 1, 30_000)
      expect(idle.events("resume")[0].resume.previousEndReason).toBe("agent_unresponsive")
      expect(idle.events("resume")[0].resume.turns.map((t: any) => t.index)).toEqual([1])
      const closed = await stalled.waitClosed()
      expect(closed.code).toBe(1000)
      const metrics = await (await fetch(`${gateway.httpBase}/metrics`)).text()
      const occurrences = new RegExp(`callgate_breaker_occurrences_total\\{[^}]*environment="${env.id}"[^}]*\\} (\\d+)`).exec(metrics)
      expect(Number(occurrences?.[1])).toBeGreaterThanOrEqual(2)
    } finally {
      stopTalking()
    }
    call.stop()
    expect(await gateway.outbox.forSession(sessionId)).toMatchObject({ status: "completed", endReason: "caller_hangup", agentFailovers: 1 })
    expect(gateway.twilio.callUpdates(callId)).toEqual([])
    idle.close()
  })

  it("the example checkpoint agent takes a call over: resume restores its digits from the previous agent's checkpoint", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const first = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const { call } = await placeCall(gateway, "twilio", agentId, env.id)
    await first.waitForEvent("start")
    const sessionId = sessionIdOf(first)
    first.send({ event: "checkpoint", checkpoint: { digits: "42" } })
    await checkpointStored(gateway, agentId, sessionId)
    first.ws.terminate()
    await call.peer.waitForEvent("clear")
    call.dtmf("7")
    const example = new CheckpointAgent({ gatewayUrl: gateway.httpBase, agentId, environmentId: env.id, apiKey: ADMIN_KEY })
    const resumed = new Promise<{ digits: string; previousEndReason: string }>((resolve) => example.once("resumed", resolve))
    const checkpointed = new Promise<string>((resolve) => example.once("checkpointed", ({ digits }) => resolve(digits)))
    await example.start()
    try {
      expect(await resumed).toMatchObject({ digits: "42", previousEndReason: "agent_disconnected" })
      // The digit typed during the hold reaches it after `resume`: it goes on from the checkpoint.
      expect(await checkpointed).toBe("427")
      call.stop()
      expect(await gateway.outbox.forSession(sessionId)).toMatchObject({ status: "completed", agentFailovers: 1 })
    } finally {
      await example.close()
    }
  })
})

describe("agent failover: a rolling restart", () => {
  let gateway: Gateway
  const workers: Array<WorkerProcess> = []
  beforeAll(async () => {
    // These test callers send a frame now and then, not every 20 ms as a carrier does: the idle
    // limit must outlast the whole restart.
    gateway = await startGateway({ env: { CARRIER_IDLE_TIMEOUT: "300s" } })
  })
  afterAll(async () => {
    for (const worker of workers) worker.child.kill("SIGKILL")
    await gateway.close()
  })

  it("4 agent workers of 2 sockets under 8 live calls, each killed (SIGKILL) while holding its calls and then restarted, one at a time: every call goes on, none falls back", async () => {
    const agentId = uniqueId("agent")
    // A restarting worker process may take a few seconds to connect on a busy machine.
    const env = await gateway.createEnvironment(agentId, { errorFallbackType: "phone", errorFallbackValue: "+14155550199", agentFailoverTimeout: 30 })
    const pool: Array<WorkerProcess> = []
    for (let i = 0; i < 4; i++) {
      const worker = await spawnWorker(gateway, agentId, env.id, { capacity: 2 })
      workers.push(worker)
      pool.push(worker)
    }
    await until(() => gateway.idleAgents(agentId, env.id) === 8, "eight idle sockets")
    const calls = new Map<string, { call: CarrierCall; callId: string }>()
    const placed: Array<{ call: CarrierCall; callId: string }> = []
    for (let i = 0; i < 8; i++) placed.push(await placeCall(gateway, "twilio", agentId, env.id))
    await until(() => pool.every((w) => w.events("start").length === 2), "two calls on every worker")
    // Which call each session is: the caller's first frame carries the call's index.
    for (const [index, entry] of placed.entries()) entry.call.media(speech[index]!)
    await until(() => pool.every((w) => w.events("media").length === 2), "each call's first frame at its worker")
    for (const worker of pool) {
      for (const media of worker.events("media")) {
        const start = worker.received.find((m) => m.event === "start" && m._socket === media._socket)
        calls.set(start.start.customParameters.sessionId, placed[speech.indexOf(media.media.payload)]!)
      }
    }
    expect(calls.size).toBe(8)

    for (let round = 0; round < 4; round++) {
      const old = pool[round]!
      const held = old.events("start").map((m) => m.start.customParameters.sessionId as string)
      old.child.kill("SIGKILL")
      for (const sessionId of held) await calls.get(sessionId)!.call.peer.waitForEvent("clear")
      // The callers go on talking while their agent restarts.
      for (const sessionId of held) calls.get(sessionId)!.call.media(speech[50 + round]!)
      const restarted = await spawnWorker(gateway, agentId, env.id, { capacity: 2 })
      workers.push(restarted)
      pool[round] = restarted
      await restarted.waitFor((r) => r.filter((m) => m.event === "media").length === 2, "the held frames at the restarted worker")
      expect(restarted.events("start").map((m) => m.start.customParameters.sessionId).sort()).toEqual([...held].sort())
      expect(restarted.events("start").every((m) => m.start.customParameters.resumed === "true")).toBe(true)
      expect(restarted.events("resume")).toHaveLength(2)
      expect(restarted.events("media").map((m) => m.media.payload)).toEqual([speech[50 + round], speech[50 + round]])
    }

    for (const { call } of calls.values()) call.stop()
    const ended = await Promise.all([...calls.keys()].map((sessionId) => gateway.outbox.forSession(sessionId)))
    expect(ended.map((e) => `${e.status}/${e.endReason}`)).toEqual(Array(8).fill("completed/caller_hangup"))
    expect(ended.map((e) => e.agentFailovers)).toEqual(Array(8).fill(1))
    for (const { callId } of calls.values()) expect(gateway.twilio.callUpdates(callId)).toEqual([])
  })
})

describe("agent failover: missed pings", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: { AGENT_PING_INTERVAL: "1s" } })
  })
  afterAll(() => gateway.close())

  it("an agent that stops answering pings mid-call is cut, and the call moves to an idle agent", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const silent = await dialInAgent(gateway, agentId, env.id, ADMIN_KEY, { autoPong: false })
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const { call } = await placeCall(gateway, "twilio", agentId, env.id)
    await silent.waitForEvent("start")
    const sessionId = sessionIdOf(silent)
    const spare = await dialInAgent(gateway, agentId, env.id)
    await spare.waitForEvent("resume", 1, 30_000)
    expect(spare.events("resume")[0].resume.previousEndReason).toBe("agent_disconnected")
    call.stop()
    expect(await gateway.outbox.forSession(sessionId)).toMatchObject({ status: "completed", agentFailovers: 1 })
    silent.close()
    spare.close()
  })
})

describe("agent failover on the Redis store", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ store: "redis" })
  })
  afterAll(() => gateway.close())

  it("the live record shows the agent legs after the failover; the closed one, both legs and the count; resume has the stored checkpoint", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const first = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const { call } = await placeCall(gateway, "twilio", agentId, env.id)
    await first.waitForEvent("start")
    const sessionId = sessionIdOf(first)
    first.send({ event: "checkpoint", checkpoint: { step: 3 } })
    await checkpointStored(gateway, agentId, sessionId)
    const second = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "a spare agent")
    first.ws.terminate()
    await second.waitForEvent("resume")
    expect(second.events("resume")[0].resume.checkpoint).toEqual({ step: 3 })
    const deadline = Date.now() + 30_000
    let live = await storedSession(gateway, agentId, sessionId)
    while (live.agentFailovers !== 1 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20))
      live = await storedSession(gateway, agentId, sessionId)
    }
    expect(live.status).toBe("active")
    expect(live.agentLegs?.map((leg) => [leg.endReason, leg.endedAt === null])).toEqual([
      ["agent_disconnected", false],
      [null, true]
    ])
    call.stop()
    expect(await gateway.outbox.forSession(sessionId)).toMatchObject({ status: "completed", agentFailovers: 1 })
    const closed = await storedSession(gateway, agentId, sessionId)
    expect(closed.agentFailovers).toBe(1)
    expect(closed.agentLegs?.map((leg) => leg.endReason)).toEqual(["agent_disconnected", "caller_hangup"])
    expect(closed.agentLegs?.every((leg) => leg.instanceId === closed.instanceId)).toBe(true)
    second.close()
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

describe("agent failover: dial-out, and AGENT_FAILOVER_MAX_PER_SESSION", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway({ env: { AGENT_CONNECT_TIMEOUT: "500ms", AGENT_ALLOW_PRIVATE_NETWORKS: "true", AGENT_FAILOVER_MAX_PER_SESSION: "1" } })
  })
  afterAll(() => gateway.close())

  it("past AGENT_FAILOVER_MAX_PER_SESSION failovers, the next abnormal end runs the fallback at once, even with an agent idle", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { errorFallbackType: "phone", errorFallbackValue: "+14155550199" })
    const agents = [await dialInAgent(gateway, agentId, env.id)]
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const { callId } = await placeCall(gateway, "twilio", agentId, env.id)
    await agents[0]!.waitForEvent("start")
    const sessionId = sessionIdOf(agents[0]!)
    for (let i = 1; i <= 2; i++) {
      agents.push(await dialInAgent(gateway, agentId, env.id))
      await until(() => gateway.idleAgents(agentId, env.id) === i, "the spare agents")
    }
    agents[0]!.ws.terminate()
    await until(() => agents.filter((a) => a.events("resume").length === 1).length === 1, "the first failover")
    const second = agents.find((a) => a.events("resume").length === 1)!
    second.ws.terminate()
    // The phone fallback's session.ended waits for the transfer's outcome (docs/fallback.md, "Transfer outcomes").
    await completeTransfer(gateway, { kind: "twilio", callId }, agentId)
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "agent_disconnected", agentFailovers: 1 })
    await until(() => gateway.twilio.callUpdates(callId).length === 1, "the fallback's call update")
    // The spare agent was never handed the call.
    expect(gateway.idleAgents(agentId, env.id)).toBe(1)
    for (const agent of agents) agent.close()
  })

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
