import { Redis } from "ioredis"
import { afterEach, describe, expect, inject, it } from "vitest"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { speechLike } from "../../sim/AudioSource.js"
import { twilioSid } from "../../sim/CallEntry.js"
import type { SimCall } from "../../sim/SimCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { ADMIN_KEY, adminAuth, TEST_SECRETS_KEY, uniqueId } from "../support/testApp.js"

/**
 * Two callgate processes (`node --import tsx src/main.ts`, as in production) on one real Redis,
 * their carrier REST pointed at one fake Twilio in this process. The no-response breaker's window
 * and its trips are shared through Redis: a stalled call on each process counts toward one
 * threshold, and the trip rescues the stalled calls on both.
 */

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const eventually = async <A>(read: () => Promise<A> | A, check: (value: A) => boolean, what: string, timeoutMs = 30_000): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (check(value)) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(value)})`)
    await sleep(10)
  }
}

interface Instance {
  readonly process: GatewayProcess
  readonly publicUrl: string
}

describe("the no-response breaker across two callgate processes on one Redis", () => {
  let twilio: FakeTwilio | undefined
  let redis: Redis | undefined
  const instances: Array<Instance> = []
  const agents: Array<SilentAgent> = []
  const calls: Array<SimCall> = []

  afterEach(async () => {
    await Promise.all(calls.splice(0).map((call) => call.hangup()))
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    await Promise.all(instances.splice(0).map((instance) => instance.process.stop("SIGTERM", 10_000)))
    await twilio?.close()
    redis?.disconnect()
    twilio = redis = undefined
  })

  /** Every no-response expiry a process recorded for the environment (its occurrence counter). */
  const occurrencesRecorded = async (instance: Instance) => {
    const text = await (await fetch(`${instance.process.baseUrl}/metrics`)).text()
    const line = text.split("\n").find((l) => l.startsWith("callgate_breaker_occurrences_total{") && l.includes(`agent="${currentAgent}"`))
    return line === undefined ? 0 : Number(line.split(" ").at(-1))
  }
  let currentAgent = ""

  const startInstance = async (name: string, fakeTwilio: FakeTwilio): Promise<Instance> => {
    const publicUrl = `https://${name}.callgate.test`
    const process = await spawnGateway({
      ADMIN_API_KEY: ADMIN_KEY,
      REDIS_URL: inject("redisUrl"),
      SECRETS_KEY: TEST_SECRETS_KEY,
      PUBLIC_URL: publicUrl,
      ...fakeTwilio.env,
      RATE_LIMIT_PER_MINUTE: "0",
      SHUTDOWN_DRAIN_TIMEOUT: "2s",
      LOG_LEVEL: "warn"
    })
    const instance = { process, publicUrl }
    instances.push(instance)
    // Starting a process under tsx is slow on a busy machine: a generous wait, not a measurement.
    await waitForHealthy(process, "/readyz", 150_000)
    return instance
  }

  it("a stalled call on each process reaches threshold 2 together, and the trip rescues both, the first no later than its next expiry", async () => {
    twilio = await startFakeTwilio()
    const fake = twilio
    const [one, two] = await Promise.all([startInstance("one", fake), startInstance("two", fake)])
    redis = new Redis(inject("redisUrl"))

    // The environment is created through /v1 on the first process; the second reads it from Redis.
    const agentId = uniqueId("agent")
    currentAgent = agentId
    const created = await fetch(`${one.process.baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({ name: "two instances", errorFallbackTimeout: 1, errorFallbackOccurrenceThreshold: 2, errorFallbackTimeWindow: 300 })
    })
    expect(created.status).toBe(201)
    const environmentId: string = ((await created.json()) as any).data.id
    const occurrencesKey = `callgate:breaker:{${agentId}:${environmentId}}:occurrences`
    const occurrences = () => redis!.zcard(occurrencesKey)

    /** A silent agent dialed into `instance`, then a simulated Twilio call to that instance's number. */
    const stalledCall = async (instance: Instance) => {
      const agent = await startSilentAgent({ gatewayUrl: instance.process.baseUrl, agentId, environmentId, apiKey: ADMIN_KEY })
      agents.push(agent)
      await agent.ready()
      const callSid = twilioSid("CA")
      const call = await placeTwilioCall({
        gatewayUrl: instance.process.baseUrl,
        agentId,
        environmentId,
        callSid,
        streamVia: "gateway",
        authToken: fake.authToken,
        publicUrl: instance.publicUrl
      })
      calls.push(call)
      await call.play(speechLike({ durationMs: 1600 }))
      return { call, callSid }
    }

    // First process: the deadline passes, one occurrence in the shared window, below the threshold.
    const first = await stalledCall(one)
    await eventually(occurrences, (n) => n === 1, "the first process's occurrence in Redis", 30_000)
    expect(fake.requests).toEqual([])
    expect(first.call.isOpen).toBe(true)

    // Second process: its first occurrence is the environment's second; the threshold is reached.
    const second = await stalledCall(two)
    // The first process's expiries counted when the trip is first seen (an upper bound of those before the trip).
    let firstExpiriesAtTrip: number | undefined
    await eventually(
      async () => {
        if (firstExpiriesAtTrip === undefined && fake.callUpdates(second.callSid).length > 0) firstExpiriesAtTrip = await occurrencesRecorded(one)
        return firstExpiriesAtTrip !== undefined && fake.callUpdates(first.callSid).length > 0
      },
      (both) => both,
      "the REST hangups of both calls",
      8000
    )
    expect(await occurrences()).toBe(2)
    // Each call got exactly one REST request, the hangup (fallback type disabled), from its own process.
    for (const { callSid } of [first, second]) {
      expect(fake.callUpdates(callSid).map((r) => r.form)).toEqual([{ Status: "completed" }])
    }
    for (const { call } of [first, second]) {
      expect(await call.closed).toMatchObject({ by: "gateway", code: 1000 })
    }

    // Both sessions are failed by the breaker; either process shows either session (one store).
    const stored = new Map<string, any>()
    for (const [instance, { callSid }] of [
      [two, first],
      [one, second]
    ] as const) {
      const listed = await eventually(
        async () => {
          const res = await fetch(`${instance.process.baseUrl}/v1/agents/${agentId}/sessions?environmentId=${environmentId}`, { headers: adminAuth })
          return ((await res.json()) as any).data.sessions as Array<any>
        },
        (sessions) => sessions.some((s) => s.callId === callSid && s.status !== "active"),
        `the end of ${callSid}`
      )
      expect(listed.find((s) => s.callId === callSid)).toMatchObject({
        status: "failed",
        endReason: "agent_unresponsive",
        fallback: { trigger: "agent_unresponsive", type: "disabled", outcome: "hung_up" }
      })
      const { id } = listed.find((s) => s.callId === callSid)
      const res = await fetch(`${instance.process.baseUrl}/v1/agents/${agentId}/sessions/${id}`, { headers: adminAuth })
      stored.set(callSid, ((await res.json()) as any).data)
    }
    const [firstSession, secondSession] = [stored.get(first.callSid), stored.get(second.callSid)]
    const at = (iso: string) => Date.parse(iso)
    // The second call tripped at its first deadline (its timer expired exactly once, after its
    // caller's last word): the first process's occurrence counted toward the same threshold.
    expect(secondSession.turns[0].timeoutOccurrences).toBe(1)
    expect(at(secondSession.fallback.carrierRequestAt)).toBeGreaterThan(at(secondSession.turns[0].callerEndedAt))
    // The first process rescued its stalled call on that trip: after the second caller's turn,
    // and no later than the first call's next expiry.
    expect(at(firstSession.fallback.carrierRequestAt)).toBeGreaterThan(at(secondSession.turns[0].callerEndedAt))
    expect(firstSession.turns[0].timeoutOccurrences).toBeLessThanOrEqual(firstExpiriesAtTrip! + 1)
    expect(one.process.stderr()).toBe("")
    expect(two.process.stderr()).toBe("")
  }, 300_000)
})
