import { Effect, Layer, Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { HardError } from "../../src/core/HardError.js"
import { Rescue } from "../../src/session/Rescue.js"
import type { SessionInfo } from "../../src/core/SessionInfo.js"
import { type ObservedSession, TurnObservers } from "../../src/session/TurnObservers.js"
import type { FallbackRecord } from "../../src/fallback/FallbackRecord.js"
import type { TurnObserver } from "../../src/turns/TurnObserver.js"
import { uniqueId } from "../support/testApp.js"
import {
  agentMedia,
  audioFrames,
  dialInAgent,
  type Gateway,
  type Peer,
  sessionIdOf,
  startGateway,
  storedSession,
  twilioCall,
  until
} from "./callHarness.js"

const caller = audioFrames("caller-appointment.ulaw", 40)
const agentVoice = audioFrames("agent-greeting.ulaw", 40)

/** What the hooks saw, per session. */
interface Observed {
  callerFrames: Array<string>
  agentFrames: Array<string>
  digits: Array<string>
  closes: number
  times: Array<number>
}

/** A fallback record a test rescue reports, recognisable by its detail. */
const testFallback = (error: HardError): FallbackRecord => ({
  trigger: error.kind,
  errorMessage: error.message,
  type: "disabled",
  outcome: "hung_up",
  startedAt: "2026-01-01T00:00:00.000Z",
  carrierRequestAt: null,
  finishedAt: "2026-01-01T00:00:00.000Z",
  webhookStatus: null,
  detail: "test rescue"
})

describe("session hooks: turn observer, rescue, live sessions, maximum duration", () => {
  let gateway: Gateway
  const observed = new Map<string, Observed>()
  const rescues: Array<{ info: SessionInfo; error: HardError; carrierOpen: boolean }> = []
  const carriersBySession = new Map<string, Peer>()
  let throwingSession: string | undefined

  beforeAll(async () => {
    const observers = Layer.succeed(TurnObservers, {
      forSession: (info) =>
        Effect.sync((): ObservedSession => {
          const seen: Observed = { callerFrames: [], agentFrames: [], digits: [], closes: 0, times: [] }
          observed.set(info.sessionId, seen)
          const observer: TurnObserver = {
            callerAudio: (frame, atMs) => {
              if (info.sessionId === throwingSession) throw new Error("observer bug")
              // The frame is only valid during the call: copy it.
              seen.callerFrames.push(Buffer.from(frame).toString("base64"))
              seen.times.push(atMs)
            },
            callerDtmf: (digit) => void seen.digits.push(digit),
            agentAudio: (frame) => void seen.agentFrames.push(Buffer.from(frame).toString("base64")),
            close: () => void seen.closes++
          }
          return { observer, turns: () => [] }
        })
    })
    const rescue = Layer.succeed(
      Rescue,
      Rescue.of({
        rescue: (info, error) =>
          Effect.sync(() => {
            const carrier = carriersBySession.get(info.sessionId)
            rescues.push({ info, error, carrierOpen: carrier !== undefined && carrier.closed === undefined })
            return { endReason: `rescued_${error.kind}`, fallback: testFallback(error) }
          })
      })
    )
    gateway = await startGateway({ observers, rescue, env: { SESSION_MAX_DURATION: "2s" } })
  })
  afterAll(() => gateway.close())

  const connectedCall = async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "idle agent")
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, {
      token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid }),
      callSid
    })
    call.start()
    await agent.waitForEvent("start")
    const sessionId = sessionIdOf(agent)
    carriersBySession.set(sessionId, call.peer)
    return { agentId, env, agent, call, callSid, sessionId }
  }

  it("the turn observer sees every caller frame, DTMF digit and agent frame as bytes, and is closed once", async () => {
    const { agent, call, sessionId } = await connectedCall()
    for (const frame of caller) call.media(frame)
    call.dtmf("4")
    await agent.waitForEvent("dtmf")
    for (const frame of agentVoice) agent.send({ event: "media", media: { payload: frame } })
    await call.peer.waitForEvent("media", agentVoice.length)
    call.stop()
    await gateway.outbox.forSession(sessionId)
    const seen = observed.get(sessionId)!
    expect(seen.callerFrames).toEqual(caller)
    expect(seen.agentFrames).toEqual(agentVoice)
    expect(seen.digits).toEqual(["4"])
    expect(seen.closes).toBe(1)
    // A monotonic clock.
    expect(seen.times.every((t, i) => i === 0 || t >= seen.times[i - 1]!)).toBe(true)
  })

  it("an observer that throws is switched off; the call goes on untouched", async () => {
    const { agent, call, sessionId } = await connectedCall()
    throwingSession = sessionId
    for (const frame of caller) call.media(frame)
    await agent.waitForEvent("media", caller.length)
    expect(agentMedia(agent)).toEqual(caller)
    call.stop()
    expect((await gateway.outbox.forSession(sessionId)).status).toBe("completed")
    throwingSession = undefined
  })

  it("a hard error goes to the Rescue port once, while the carrier stream is still open; its outcome is recorded", async () => {
    const { agent, agentId, call, callSid, sessionId } = await connectedCall()
    agent.send({ event: "error", error: { message: "model unavailable" } })
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "rescued_agent_error" })
    const mine = rescues.filter((r) => r.info.sessionId === sessionId)
    expect(mine).toHaveLength(1)
    expect(mine[0]!.error).toBeInstanceOf(HardError)
    expect(mine[0]!.error.kind).toBe("agent_error")
    expect(mine[0]!.error.message).toContain("model unavailable")
    expect(mine[0]!.info.call).toEqual({ kind: "twilio", callId: callSid, accountSid: gateway.twilio.accountSid })
    expect(mine[0]!.carrierOpen).toBe(true)
    // The rescue decided what happened to the call: the session made no carrier request itself.
    expect(gateway.twilio.callUpdates(callSid)).toEqual([])
    expect(await storedSession(gateway, agentId, sessionId)).toMatchObject({
      status: "failed",
      endReason: "rescued_agent_error",
      fallback: { trigger: "agent_error", detail: "test rescue" }
    })
    await call.peer.waitClosed()
  })

  it("live sessions are enumerable per environment and reachable by call id; fail() triggers the rescue once", async () => {
    const { agentId, env, callSid, sessionId } = await connectedCall()
    const live = gateway.registry.liveSessions(agentId, env.id)
    expect(live.map((s) => s.info.sessionId)).toEqual([sessionId])
    expect(live[0]!.info).toMatchObject({ agentId, environmentId: env.id, provider: "twilio", direction: "inbound" })
    expect(Option.map(gateway.registry.byCallId(callSid), (s) => s.info.sessionId)).toEqual(Option.some(sessionId))
    expect(Option.isSome(gateway.registry.get(sessionId))).toBe(true)
    expect(live[0]!.ending()).toEqual(Option.none())

    const error = new HardError({ kind: "agent_unresponsive", message: "The agent did not answer in time." })
    expect(live[0]!.fail(error)).toBe(true)
    expect(live[0]!.fail(new HardError({ kind: "internal", message: "again" }))).toBe(false)
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "failed", endReason: "rescued_agent_unresponsive" })
    expect(rescues.filter((r) => r.info.sessionId === sessionId).map((r) => r.error)).toEqual([error])
    await until(() => gateway.registry.liveSessions(agentId, env.id).length === 0, "the session to leave the registry")
    expect(Option.isNone(gateway.registry.byCallId(callSid))).toBe(true)
  })

  it("a session reaching SESSION_MAX_DURATION ends as timeout and the call is hung up", async () => {
    const { agent, call, callSid, sessionId } = await connectedCall()
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "timeout", endReason: "max_duration" })
    expect(Number(ended.duration)).toBeGreaterThanOrEqual(2)
    expect(gateway.twilio.callUpdates(callSid)[0]!.form).toEqual({ Status: "completed" })
    await agent.waitForEvent("stop")
    await call.peer.waitClosed()
  })
})
