import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { performance } from "node:perf_hooks"
import { afterEach, describe, expect, inject, it } from "vitest"
import { SilentAgent } from "../../examples/agents/silent-agent.js"
import type { CallStart } from "../../examples/agents/agent-runtime.js"
import { telnyxCallControlId, twilioSid } from "../../sim/CallEntry.js"
import type { SimCall } from "../../sim/SimCall.js"
import { connectTelnyxStream, placeTelnyxTexmlCall } from "../../sim/TelnyxCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type FakeTelnyx, startFakeTelnyx } from "../support/fakeTelnyx.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { type GatewayProcess, spawnGateway, spawnHeldGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { freePort } from "../support/redisServer.js"
import { ADMIN_KEY, adminAuth, TEST_SECRETS_KEY, uniqueId } from "../support/testApp.js"
import { CA_FILE, type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { until } from "../faults/faultRig.js"
import { Redis } from "ioredis"
import { makeKeys } from "../../src/redis/keys.js"

/**
 * Agents reconnecting right after a restart (issue 31, point 6): an agent whose socket is open
 * serves the next call of its environment, whichever instance answers the call's webhook, and
 * right after a SIGKILL and restart under the same INSTANCE_ID (whose previous run left idle
 * sockets and reservations in the store). No waiting on the registry: each call is placed the
 * moment the agent's socket opens (its `ready`), for a Twilio call, a Telnyx TeXML call and a
 * Telnyx Call Control call (placed at call.initiated, answered through the REST API).
 *
 * The restart case proves something only while the killed run's reservations (RESERVATION_HOLD_MS,
 * 10 s from each placement) still hold: it checks so in Redis, in Redis time, once each Twilio
 * call after the restart is placed (a failure there says the restart came too late, not that
 * placement is wrong). To come well inside that, the replacing process is spawned with its modules
 * loaded before the kill (spawnHeldGateway) and the agent's sockets retry every 100 ms at most.
 * With the code before a65fa31 (socket ids `{INSTANCE_ID}.{n}`, numbered from 1 again by the
 * restart) both Twilio calls end `no_idle_agent`: the new sockets carry the ids the old holds name.
 */

type Kind = "twilio" | "texml" | "call-control"
const KINDS: ReadonlyArray<Kind> = ["twilio", "texml", "call-control"]

interface Instance {
  gateway: GatewayProcess
  readonly baseUrl: string
  readonly env: Record<string, string>
}

describe("agents reconnecting right after a restart: the next call reaches them", () => {
  let twilio: FakeTwilio | undefined
  let telnyx: FakeTelnyx | undefined
  let receiver: Receiver | undefined
  const instances: Array<Instance> = []
  const agents: Array<SilentAgent> = []
  const calls: Array<SimCall> = []
  const redisClients: Array<Redis> = []
  /** Processes started ahead of a restart, not yet an instance. */
  const spares: Array<GatewayProcess> = []

  afterEach(async () => {
    for (const client of redisClients.splice(0)) client.disconnect()
    await Promise.all(spares.splice(0).map((gateway) => gateway.stop("SIGKILL")))
    await Promise.all(calls.splice(0).map((call) => call.hangup().catch(() => undefined)))
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    await Promise.all(instances.splice(0).map(({ gateway }) => gateway.stop("SIGKILL")))
    await twilio?.close()
    await telnyx?.close()
    await receiver?.close()
    twilio = telnyx = receiver = undefined
  })

  const setUp = async (names: ReadonlyArray<string>) => {
    const fakeTwilio = (twilio = await startFakeTwilio())
    const fakeTelnyx = (telnyx = await startFakeTelnyx())
    const hooks = (receiver = await startReceiver())
    const prefix = `${uniqueId("agentsready")}:`
    const start = async (name: string): Promise<Instance> => {
      const port = await freePort()
      const baseUrl = `http://127.0.0.1:${port}`
      const env = {
        ADMIN_API_KEY: ADMIN_KEY,
        REDIS_URL: inject("redisUrl"),
        SECRETS_KEY: TEST_SECRETS_KEY,
        REDIS_KEY_PREFIX: prefix,
        INSTANCE_ID: uniqueId(name),
        DATA_DIR: mkdtempSync(join(tmpdir(), "callgate-agentsready-")),
        PORT: String(port),
        PUBLIC_URL: baseUrl,
        ...fakeTwilio.env,
        ...fakeTelnyx.env,
        RATE_LIMIT_PER_MINUTE: "0",
        WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
        WEBHOOK_CA_FILE: CA_FILE,
        WEBHOOK_RETRY_SCHEDULE: "1s,1s,2s,5s,5s,5s",
        LOG_LEVEL: "info"
      }
      const gateway = await spawnGateway(env)
      await waitForHealthy(gateway, "/readyz", 90_000)
      const instance = { gateway, baseUrl, env }
      instances.push(instance)
      return instance
    }
    const started = await Promise.all(names.map(start))
    const agentId = uniqueId("agent")
    const environmentId = async (kind: Kind) => {
      const created = await fetch(`${started[0]!.baseUrl}/v1/agents/${agentId}/environments`, {
        method: "POST",
        headers: { ...adminAuth, "content-type": "application/json" },
        body: JSON.stringify({ name: kind, webhookUrl: hooks.url("/events") })
      })
      expect(created.status).toBe(201)
      return ((await created.json()) as { data: { id: string } }).data.id
    }
    const environments = new Map<Kind, string>()
    for (const kind of KINDS) environments.set(kind, await environmentId(kind))

    /** A call of `kind` whose webhook `entry` answers; resolves once its stream is open. */
    const place = async (kind: Kind, entry: Instance, environment = environments.get(kind)!): Promise<{ callId: string; call: SimCall }> => {
      if (kind === "twilio") {
        const callSid = twilioSid("CA")
        const call = await placeTwilioCall({ gatewayUrl: entry.baseUrl, agentId, environmentId: environment, callSid, accountSid: fakeTwilio.accountSid, authToken: fakeTwilio.authToken })
        calls.push(call)
        return { callId: callSid, call }
      }
      if (kind === "texml") {
        const callSid = telnyxCallControlId()
        const call = await placeTelnyxTexmlCall({ gatewayUrl: entry.baseUrl, agentId, environmentId: environment, callSid, webhookHeaders: (body) => fakeTelnyx.signWebhook(body) })
        calls.push(call)
        return { callId: callSid, call }
      }
      // Call Control: placement runs at call.initiated; callgate answers with the stream through the REST API.
      const callControlId = telnyxCallControlId()
      const body = fakeTelnyx.callControlEvent("call.initiated", {
        call_control_id: callControlId,
        connection_id: "1684641123236054244",
        from: "+15550100001",
        to: "+15550100002",
        direction: "incoming"
      })
      const url = `${entry.baseUrl}/telephony/telnyx/call-control?${new URLSearchParams({ agentId, environmentId: environment }).toString()}`
      const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...fakeTelnyx.signWebhook(body) }, body })
      await response.text()
      expect(response.status).toBe(200)
      await fakeTelnyx.waitFor(() => fakeTelnyx.commands(callControlId, "answer").length > 0, 60_000)
      const command = fakeTelnyx.commands(callControlId, "answer")[0]!.json as { stream_url: string; stream_auth_token: string; client_state: string }
      const call = await connectTelnyxStream({ url: command.stream_url, streamAuthToken: command.stream_auth_token, callControlId, clientState: command.client_state })
      calls.push(call)
      return { callId: callControlId, call }
    }

    const sessions = async () => {
      const response = await fetch(`${started[0]!.baseUrl}/v1/agents/${agentId}/sessions?limit=100`, { headers: adminAuth })
      return ((await response.json()) as { data: { sessions: Array<{ id: string; status: string; endReason: string | null; callId: string }> } }).data.sessions
    }
    const endedEvents = () =>
      hooks.requests.map((request) => JSON.parse(request.body.toString("utf8"))).filter((event) => event.event === "session.ended") as Array<{ sessionId: string; endReason: string }>
    return { instances: started, agentId, environments, environmentId, place, sessions, endedEvents, fakeTwilio }
  }

  /** When each session's call started at an agent (the agent's `start` names the session as its callSid). */
  const startedAt = new Map<string, number>()
  const listenForStarts = (agent: SilentAgent) => agent.on("call", (start: CallStart) => startedAt.set(start.callSid, performance.now()))

  /** The call's session: whether an agent got its start (and when), or it ended without one. */
  const outcomeOf = (sessions: () => Promise<ReadonlyArray<{ id: string; status: string; callId: string }>>, callId: string) =>
    until(
      async () => {
        const session = (await sessions()).find((s) => s.callId === callId)
        if (session === undefined) return undefined
        const at = startedAt.get(session.id)
        if (at !== undefined) return { reached: true, at }
        return session.status === "active" ? undefined : { reached: false, at: 0 }
      },
      (outcome) => outcome !== undefined,
      `call ${callId} at an agent or ended`,
      120_000
    ).then((outcome) => outcome!)

  const figures = (ms: ReadonlyArray<number>) => {
    const sorted = [...ms].sort((a, b) => a - b)
    return `median ${Math.round(sorted[Math.floor(sorted.length / 2)]!)} ms, max ${Math.round(sorted[sorted.length - 1]!)} ms`
  }

  it("two instances: an agent whose socket just opened on B (or on A) serves the next call whose webhook A answers, Twilio, TeXML and Call Control: 12/12 answered by that agent, 0 no_idle_agent, 12/12 session.ended once, 0 active", async () => {
    const { instances: [a, b], agentId, environmentId, place, sessions, endedEvents } = await setUp(["a", "b"])
    const readyToAgent: Array<number> = []
    let answered = 0
    for (const round of [0, 1]) {
      for (const kind of KINDS) {
        for (const agentOn of [b!, a!]) {
          // A fresh environment and agent with one socket: nothing else of the environment is idle anywhere.
          const environment = await environmentId(kind)
          const agent = new SilentAgent({ gatewayUrl: agentOn.baseUrl, agentId, environmentId: environment, apiKey: ADMIN_KEY, capacity: 1 })
          agents.push(agent)
          listenForStarts(agent)
          await agent.start()
          await agent.ready(60_000)
          const readyAt = performance.now()
          const { callId, call } = await place(kind, a!, environment)
          const outcome = await outcomeOf(sessions, callId)
          expect({ round, kind, agentOn: agentOn === a ? "a" : "b", reached: outcome.reached }).toEqual({ round, kind, agentOn: agentOn === a ? "a" : "b", reached: true })
          readyToAgent.push(outcome.at - readyAt)
          answered++
          await call.hangup()
          await agent.close()
        }
      }
    }
    const total = 2 * KINDS.length * 2
    const ended = await until(sessions, (all) => all.length === total && all.every((s) => s.status !== "active"), `${total} terminal sessions`)
    const noIdle = ended.filter((s) => s.endReason === "no_idle_agent").length
    const delivered = await until(endedEvents, (events) => new Set(events.map((e) => e.sessionId)).size >= total, `${total} session.ended`)
    console.log(
      `agents ready on B or A, webhooks on A: ${answered}/${total} answered by the agent that had just connected, ${noIdle} no_idle_agent; ` +
        `agent ready -> its call's start at the agent (webhook, placement, stream): ${figures(readyToAgent)}`
    )
    expect(answered).toBe(total)
    expect(noIdle).toBe(0)
    expect(delivered).toHaveLength(total)
    expect(new Set(delivered.map((e) => e.sessionId))).toEqual(new Set(ended.map((s) => s.id)))
    expect(ended.filter((s) => s.status === "active")).toHaveLength(0)
  }, 300_000)

  it("SIGKILL with 6 live calls, restart under the same INSTANCE_ID while the first run's 6 reservations still hold (read from Redis, in Redis time, as each Twilio call is placed): a call placed as each agent socket reconnects reaches an agent (Twilio, TeXML, Call Control: 6/6), 0 no_idle_agent, 12/12 session.ended once, 0 active", async () => {
    const { instances: [a], agentId, environments, place, sessions, endedEvents } = await setUp(["restarted"])
    const instance = a!
    const redis = new Redis(instance.env.REDIS_URL!)
    redisClients.push(redis)
    const held = makeKeys(instance.env.REDIS_KEY_PREFIX!).fleetAgents(agentId, environments.get("twilio")!, "held")
    /** The store's clock and the holds on the Twilio environment's sockets (socket -> end of hold), read at one instant. */
    const holdsNow = async () => {
      const replies = (await redis.multi().time().zrange(held, 0, -1, "WITHSCORES").exec())!
      const [seconds, micros] = replies[0]![1] as [string, string]
      const flat = replies[1]![1] as Array<string>
      const holds = new Map<string, number>()
      for (let i = 0; i + 1 < flat.length; i += 2) holds.set(flat[i]!, Number(flat[i + 1]))
      return { now: Number(seconds) * 1000 + Math.floor(Number(micros) / 1000), holds }
    }
    const before = 6
    // Every call of the first run in one environment (Twilio): its agent's sockets are all reserved then taken.
    // While the instance is down its sockets retry every 100 ms at most, so they are back as soon as it listens.
    const worker = new SilentAgent({ gatewayUrl: instance.baseUrl, agentId, environmentId: environments.get("twilio")!, apiKey: ADMIN_KEY, capacity: before, reconnectDelayMs: 50, maxReconnectDelayMs: 100 })
    agents.push(worker)
    listenForStarts(worker)
    await worker.start()
    await worker.ready(60_000)
    // The process that restarts the instance, its modules loaded ahead (it starts on release, after
    // the kill): so the restart is the gateway's start-up, seconds before the first run's holds lapse.
    const restart = await spawnHeldGateway(instance.env)
    spares.push(restart.gateway)
    // The first run's calls at once: their reservations are taken moments before the kill.
    const first = await Promise.all(Array.from({ length: before }, () => place("twilio", instance)))
    for (const { callId } of first) expect((await outcomeOf(sessions, callId)).reached).toBe(true)
    // What the killed process leaves in the store: one hold per call, on its own sockets.
    const { holds: firstRun } = await holdsNow()
    expect([...firstRun.keys()].filter((socket) => socket.startsWith(`${instance.env.INSTANCE_ID}.`))).toHaveLength(before)
    const firstRunHeldUntil = Math.min(...firstRun.values())
    // One worker per other environment after the restart, one socket each per call.
    const others = KINDS.filter((kind) => kind !== "twilio").map((kind) => {
      const agent = new SilentAgent({ gatewayUrl: instance.baseUrl, agentId, environmentId: environments.get(kind)!, apiKey: ADMIN_KEY, capacity: 2, reconnectDelayMs: 50 })
      agents.push(agent)
      listenForStarts(agent)
      return { kind, agent }
    })

    const killedAt = performance.now()
    expect(await instance.gateway.stop("SIGKILL")).toEqual({ code: null, signal: "SIGKILL" })
    await Promise.all(first.map(({ call }) => call.closed))
    // The first run's calls' sockets reconnect once the instance is back. Each socket that opens
    // gets a call at once: Twilio on the worker's first two, then the others' in turn.
    const readyToAgent: Array<number> = []
    const outcomes: Array<Promise<{ kind: Kind; reached: boolean }>> = []
    /** Per Twilio call after the restart, once its stream is open: the first run's holds still in force, and the least time one had left (Redis time). */
    const whilePlaced: Array<{ stillHeld: number; msLeft: number }> = []
    const placeNow = (kind: Kind) => {
      const readyAt = performance.now()
      outcomes.push(
        place(kind, instance).then(async ({ callId }) => {
          if (kind === "twilio") {
            const { now, holds } = await holdsNow()
            const stillHeld = [...firstRun.keys()].filter((socket) => (holds.get(socket) ?? 0) > now).length
            whilePlaced.push({ stillHeld, msLeft: firstRunHeldUntil - now })
          }
          const outcome = await outcomeOf(sessions, callId)
          if (outcome.reached) readyToAgent.push(outcome.at - readyAt)
          return { kind, reached: outcome.reached }
        })
      )
    }
    const onReady = (kind: Kind, agent: SilentAgent, onOpen: () => void = () => undefined) => {
      let left = 2
      agent.pool!.on("ready", () => {
        onOpen()
        if (left <= 0) return
        left--
        placeNow(kind)
      })
    }
    let workerOpened = 0
    onReady("twilio", worker, () => workerOpened++)
    restart.release()
    instance.gateway = spares.splice(spares.indexOf(restart.gateway), 1)[0]!
    await waitForHealthy(instance.gateway, "/readyz", 90_000)
    const readyAgainMs = performance.now() - killedAt
    // The worker's sockets first (their ids would be the ones the first run's holds name, were ids not per run), then the others.
    await until(() => workerOpened, (n) => n >= before, `the worker's ${before} sockets open again`, 120_000)
    for (const { kind, agent } of others) {
      // Listening from the start: its sockets open (and say ready) on later turns of the event loop.
      await agent.start()
      onReady(kind, agent)
    }
    await until(() => outcomes.length, (n) => n === 6, "a call placed as each of 6 agent sockets opened after the restart", 120_000)
    const settled = await Promise.all(outcomes)
    const answered = settled.filter((outcome) => outcome.reached).length

    await Promise.all(calls.filter((call) => call.isOpen).map((call) => call.hangup()))
    const total = before + 6
    const ended = await until(sessions, (all) => all.length === total && all.every((s) => s.status !== "active"), `${total} terminal sessions`, 120_000)
    const noIdle = ended.filter((s) => s.endReason === "no_idle_agent").length
    const delivered = await until(endedEvents, (events) => new Set(events.map((e) => e.sessionId)).size >= total, `${total} session.ended`, 120_000)
    console.log(
      `restart under the same INSTANCE_ID: ${answered}/6 calls placed as agent sockets reconnected answered by an agent ` +
        `(${KINDS.map((kind) => `${kind} ${settled.filter((o) => o.kind === kind && o.reached).length}/2`).join(", ")}), ${noIdle} no_idle_agent; ` +
        `the first run's ${before} holds when each Twilio call's stream was open: ${whilePlaced.map((p) => `${p.stillHeld} still held, ${p.msLeft} ms left`).join("; ")} (Redis time); ` +
        `socket ready -> the call's start at the agent: ${figures(readyToAgent)}; ready again ${Math.round(readyAgainMs)} ms after the kill; its ${before} calls: ` +
        `${ended.filter((s) => s.endReason === "instance_lost").length} instance_lost`
    )
    // The case's precondition: both Twilio calls were placed while every hold of the killed run was in force.
    expect(whilePlaced.map((p) => p.stillHeld), "the first run's holds still in force as each Twilio call was placed after the restart").toEqual([before, before])
    expect(settled.filter((outcome) => !outcome.reached).map((outcome) => outcome.kind), "calls after the restart that ended without reaching an agent").toEqual([])
    expect(noIdle).toBe(0)
    expect(ended.filter((s) => s.endReason === "instance_lost")).toHaveLength(before)
    expect(delivered).toHaveLength(total)
    expect(new Set(delivered.map((e) => e.sessionId))).toEqual(new Set(ended.map((s) => s.id)))
    expect(ended.filter((s) => s.status === "active")).toHaveLength(0)
  }, 300_000)
})
