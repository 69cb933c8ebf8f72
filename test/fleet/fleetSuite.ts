import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { SilentAgent } from "../../examples/agents/silent-agent.js"
import { speechLike } from "../../sim/AudioSource.js"
import { twilioSid } from "../../sim/CallEntry.js"
import type { SimCall } from "../../sim/SimCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { type Nginx, startFleetNginx } from "../../bench/nginx.js"
import { freePort } from "../support/redisServer.js"
import { ADMIN_KEY, adminAuth, TEST_SECRETS_KEY, uniqueId } from "../support/testApp.js"

/**
 * The fleet as deploy/ runs it (docs/scaling.md): three callgate processes on one Redis behind a
 * real nginx configured by deploy/nginx/callgate.conf. Every webhook, /v1 request and agent
 * connection goes through nginx's one address; the media streams go through it too, to the
 * instance their URL names. Idle dial-in agents are spread unevenly over the instances; a call
 * for every idle agent is answered, wherever its webhook landed, and one call more than the
 * fleet's capacity is rescued (no_idle_agent), exactly that one.
 *
 * FLEET_TEST_CAPACITY (default 100,40,10) sets the agents per instance.
 */
const CAPACITY = (process.env.FLEET_TEST_CAPACITY ?? "100,40,10").split(",").map(Number)
const TOTAL = CAPACITY.reduce((a, b) => a + b, 0)
const INSTANCES = ["callgate-1", "callgate-2", "callgate-3"] as const

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const eventually = async <A>(read: () => Promise<A> | A, check: (value: A) => boolean, what: string, timeoutMs = 60_000): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (check(value)) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(value)})`)
    await sleep(50)
  }
}

export interface FleetHarness {
  readonly nginx: Nginx
  readonly gateways: ReadonlyArray<GatewayProcess>
  readonly twilio: FakeTwilio
  readonly stop: () => Promise<void>
}

/** Three instances on `redisUrl`, behind nginx, carrier REST at one fake Twilio that checks nothing but records. */
export const startFleet = async (redisUrl: string, extraEnv: Record<string, string> = {}): Promise<FleetHarness> => {
  const twilio = await startFakeTwilio()
  const ports = await Promise.all(INSTANCES.map(() => freePort()))
  const nginx = await startFleetNginx(ports)
  const prefix = `${uniqueId("fleet")}:`
  const gateways = await Promise.all(
    INSTANCES.map((id, i) =>
      spawnGateway({
        PORT: String(ports[i]),
        INSTANCE_ID: id,
        PUBLIC_URL: `${nginx.baseUrl}/i/${id}`,
        FLEET_URL: nginx.baseUrl,
        ADMIN_API_KEY: ADMIN_KEY,
        REDIS_URL: redisUrl,
        REDIS_KEY_PREFIX: prefix,
        SECRETS_KEY: TEST_SECRETS_KEY,
        ...twilio.env,
        RATE_LIMIT_PER_MINUTE: "0",
        SHUTDOWN_DRAIN_TIMEOUT: "2s",
        // 150 agents and 150 callers live in the test process: on a saturated machine it can miss
        // a 15 s pong, which would cut a call for a reason this test is not about.
        AGENT_PING_INTERVAL: "120s",
        LOG_LEVEL: "warn",
        ...extraEnv
      })
    )
  )
  await Promise.all(gateways.map((gateway) => waitForHealthy(gateway, "/readyz", 120_000)))
  return {
    nginx,
    gateways,
    twilio,
    stop: async () => {
      await Promise.all(gateways.map((gateway) => gateway.stop("SIGTERM", 10_000)))
      await nginx.stop()
      await twilio.close()
    }
  }
}

interface Listed {
  readonly id: string
  readonly publicUrl: string
  readonly idleAgents: ReadonlyArray<{ readonly agentId: string; readonly idle: number }>
  readonly liveCalls: number
}

export const listInstances = async (base: string): Promise<ReadonlyArray<Listed>> => {
  const response = await fetch(`${base}/v1/instances`, { headers: adminAuth })
  return ((await response.json()) as { data: { instances: Array<Listed> } }).data.instances
}

export const idleOf = (instances: ReadonlyArray<Listed>, agentId: string) =>
  Object.fromEntries(instances.map((entry) => [entry.id, entry.idleAgents.filter((e) => e.agentId === agentId).reduce((sum, e) => sum + e.idle, 0)]))

/** The fleet test itself, run against any store (one Redis here, a Redis Cluster in fleetCluster.test.ts). */
export const fleetPlacementSuite = (name: string, redisUrl: () => string, extraEnv: () => Record<string, string> = () => ({})) =>
  describe(`a fleet of three behind nginx (${name})`, () => {
    let fleet: FleetHarness
    const agents: Array<SilentAgent> = []
    const calls: Array<SimCall> = []

    beforeAll(async () => {
      fleet = await startFleet(redisUrl(), extraEnv())
    }, 180_000)

    afterAll(async () => {
      await Promise.all(calls.splice(0).map((call) => call.hangup().catch(() => {})))
      await Promise.all(agents.splice(0).map((agent) => agent.close()))
      await fleet?.stop()
    })

    it(`${TOTAL} calls through nginx for ${CAPACITY.join("/")} idle agents: every one answered, every caller frame relayed; one more is rescued, exactly that one`, { timeout: 600_000 }, async () => {
      const base = fleet.nginx.baseUrl
      const agentId = uniqueId("agent")
      const created = await fetch(`${base}/v1/agents/${agentId}/environments`, {
        method: "POST",
        headers: { ...adminAuth, "content-type": "application/json" },
        body: JSON.stringify({ name: "fleet" })
      })
      expect(created.status).toBe(201)
      const environmentId = ((await created.json()) as { data: { id: string } }).data.id

      // Agent workers dial in through nginx, each pinned to one instance by its /i/{id}/ address.
      const received = new Map<string, number>()
      const ended = new Set<string>()
      const answeredOn = new Map<string, string>()
      for (const [i, id] of INSTANCES.entries()) {
        const agent = new SilentAgent({ gatewayUrl: `${base}/i/${id}`, agentId, environmentId, apiKey: ADMIN_KEY, capacity: CAPACITY[i]! })
        agent.on("call", (start) => answeredOn.set(start.customParameters.from!, id))
        agent.on("callerMedia", (audio, _at, call) => {
          const from = call.started?.customParameters.from ?? ""
          received.set(from, (received.get(from) ?? 0) + audio.length)
        })
        agent.on("callEnded", ({ call }) => ended.add(call.customParameters.from!))
        agents.push(await agent.start())
      }
      await eventually(
        async () => idleOf(await listInstances(base), agentId),
        (idle) => INSTANCES.every((id, i) => idle[id] === CAPACITY[i]),
        "the registry to show every idle agent"
      )

      // One call per idle agent, webhooks through nginx (least connections: any instance answers).
      const numbers: Array<string> = []
      for (let batch = 0; batch < TOTAL; batch += 10) {
        const placed = await Promise.all(
          Array.from({ length: Math.min(10, TOTAL - batch) }, (_, k) => {
            const from = `+1555${String(1_000_000 + batch + k).padStart(7, "0")}`
            numbers.push(from)
            return placeTwilioCall({
              gatewayUrl: base,
              agentId,
              environmentId,
              from,
              authToken: fleet.twilio.authToken
            })
          })
        )
        calls.push(...placed)
      }
      await eventually(() => answeredOn.size, (n) => n === TOTAL, "every call answered by an agent")
      // Each instance's agents took exactly their share: no call crossed to an instance without a reserved agent.
      const perInstance = Object.fromEntries(INSTANCES.map((id) => [id, [...answeredOn.values()].filter((on) => on === id).length]))
      expect(perInstance).toEqual(Object.fromEntries(INSTANCES.map((id, i) => [id, CAPACITY[i]])))
      expect(fleet.twilio.callUpdates()).toEqual([])

      // The fleet is at capacity: one call more is rescued at once, and only it.
      const extraSid = twilioSid("CA")
      const extra = await placeTwilioCall({ gatewayUrl: base, agentId, environmentId, callSid: extraSid, from: "+15559999999", authToken: fleet.twilio.authToken })
      calls.push(extra)
      const failed = await eventually(
        async () => {
          const response = await fetch(`${base}/v1/agents/${agentId}/sessions?status=failed`, { headers: adminAuth })
          return ((await response.json()) as { data: { sessions: Array<{ callId: string; endReason: string }> } }).data.sessions
        },
        (sessions) => sessions.length > 0,
        "the extra call's rescue"
      )
      expect(failed.map((s) => [s.callId, s.endReason])).toEqual([[extraSid, "no_idle_agent"]])
      await eventually(() => fleet.twilio.callUpdates(extraSid).length, (n) => n > 0, "the rescue's REST request")
      expect(new Set(fleet.twilio.callUpdates().map((r) => r.path))).toEqual(new Set(fleet.twilio.callUpdates(extraSid).map((r) => r.path)))
      for (const call of calls.slice(0, TOTAL)) expect(call.isOpen).toBe(true)

      // The callers hang up: every frame each one sent reached its agent.
      const sent = new Map<string, number>()
      await Promise.all(
        calls.slice(0, TOTAL).map(async (call, i) => {
          await call.hangup()
          sent.set(numbers[i]!, call.stats.framesSent * 160)
        })
      )
      await eventually(() => ended.size, (n) => n === TOTAL, "every agent to hear the end of its call")
      // Still only the extra call failed: every other call ran whole to its caller's hang-up.
      const failedAfter = await fetch(`${base}/v1/agents/${agentId}/sessions?status=failed`, { headers: adminAuth })
      const failedSessions = ((await failedAfter.json()) as { data: { sessions: Array<{ callId: string; endReason: string }> } }).data.sessions
      expect(failedSessions.map((s) => [s.callId, s.endReason])).toEqual([[extraSid, "no_idle_agent"]])
      for (const from of numbers) expect({ from, bytes: received.get(from) ?? 0 }).toEqual({ from, bytes: sent.get(from) })
      const completed = await eventually(
        async () => {
          const response = await fetch(`${base}/v1/agents/${agentId}/sessions?status=completed&limit=100`, { headers: adminAuth })
          return ((await response.json()) as { data: { sessions: Array<unknown>; nextCursor: string | null } }).data
        },
        (page) => page.sessions.length === Math.min(TOTAL, 100),
        "every session recorded completed"
      )
      expect(completed.sessions.length).toBe(Math.min(TOTAL, 100))
    })
    it("the breaker tripped by stalled calls on all three instances rescues every stalled caller on every instance", { timeout: 300_000 }, async () => {
      const base = fleet.nginx.baseUrl
      const agentId = uniqueId("agent")
      const created = await fetch(`${base}/v1/agents/${agentId}/environments`, {
        method: "POST",
        headers: { ...adminAuth, "content-type": "application/json" },
        body: JSON.stringify({ name: "stalls", errorFallbackTimeout: 1, errorFallbackOccurrenceThreshold: 3, errorFallbackTimeWindow: 300 })
      })
      expect(created.status).toBe(201)
      const environmentId = ((await created.json()) as { data: { id: string } }).data.id

      // One silent agent per instance: placement puts one call on each.
      const answeredOn = new Map<string, string>()
      for (const id of INSTANCES) {
        const agent = new SilentAgent({ gatewayUrl: `${base}/i/${id}`, agentId, environmentId, apiKey: ADMIN_KEY, capacity: 1 })
        agent.on("call", (start) => answeredOn.set(start.callSid, id))
        agents.push(await agent.start())
      }
      await eventually(
        async () => idleOf(await listInstances(base), agentId),
        (idle) => INSTANCES.every((id) => idle[id] === 1),
        "the registry to show one idle agent per instance"
      )
      const stalled: Array<{ call: SimCall; callSid: string }> = []
      for (let i = 0; i < INSTANCES.length; i++) {
        const callSid = twilioSid("CA")
        const call = await placeTwilioCall({ gatewayUrl: base, agentId, environmentId, callSid, authToken: fleet.twilio.authToken })
        calls.push(call)
        stalled.push({ call, callSid })
      }
      await eventually(() => answeredOn.size, (n) => n === INSTANCES.length, "every stalled call answered by an agent")
      expect(new Set(answeredOn.values())).toEqual(new Set(INSTANCES))

      // Every caller speaks; no agent answers: the third no-response trips the environment's
      // breaker through the store, and every instance rescues its stalled caller.
      await Promise.all(stalled.map(({ call }) => call.play(speechLike({ durationMs: 1200 }))))
      await eventually(
        () => stalled.filter(({ callSid }) => fleet.twilio.callUpdates(callSid).length > 0).length,
        (n) => n === stalled.length,
        "a rescue of every stalled caller"
      )
      for (const { call } of stalled) expect(await call.closed).toMatchObject({ by: "gateway" })
    })
  })
