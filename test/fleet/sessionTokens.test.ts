import { afterEach, describe, expect, inject, it } from "vitest"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { entryUrl, postEntryWebhook, twilioSid } from "../../sim/CallEntry.js"
import type { SimCall } from "../../sim/SimCall.js"
import { connectTwilioStream } from "../../sim/TwilioCall.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { ADMIN_KEY, adminAuth, TEST_SECRETS_KEY, uniqueId } from "../support/testApp.js"
import { listInstances } from "./fleetSuite.js"

/**
 * Session tokens across a fleet (docs/scaling.md, "Session tokens"): real callgate processes on
 * one real Redis, sharing SECRETS_KEY. A token issued by one instance opens a stream on another,
 * is refused (1008, logged) when it is presented again on any instance, and outlives a restart of
 * the instance that issued it.
 */

interface Instance {
  process: GatewayProcess
  readonly wsUrl: () => string
}

describe("session tokens across instances on one Redis", () => {
  let twilio: FakeTwilio | undefined
  const processes: Array<GatewayProcess> = []
  const agents: Array<SilentAgent> = []
  const calls: Array<SimCall> = []
  const prefix = `${uniqueId("tok")}:`

  afterEach(async () => {
    await Promise.all(calls.splice(0).map((call) => call.hangup().catch(() => {})))
    await Promise.all(agents.splice(0).map((agent) => agent.close()))
    await Promise.all(processes.splice(0).map((p) => p.stop("SIGTERM", 10_000)))
    await twilio?.close()
    twilio = undefined
  })

  const start = async (name: string, port?: number): Promise<GatewayProcess> => {
    const process = await spawnGateway({
      ADMIN_API_KEY: ADMIN_KEY,
      REDIS_URL: inject("redisUrl"),
      REDIS_KEY_PREFIX: prefix,
      SECRETS_KEY: TEST_SECRETS_KEY,
      PUBLIC_URL: `https://${name}.callgate.test`,
      // Carrier REST at the fake Twilio; no TWILIO_AUTH_TOKEN: requests here carry no signatures.
      TWILIO_ACCOUNT_SID: twilio!.env.TWILIO_ACCOUNT_SID!,
      TWILIO_API_BASE_URL: twilio!.env.TWILIO_API_BASE_URL!,
      RATE_LIMIT_PER_MINUTE: "0",
      SHUTDOWN_DRAIN_TIMEOUT: "2s",
      LOG_LEVEL: "info",
      ...(port === undefined ? {} : { PORT: String(port) })
    })
    processes.push(process)
    await waitForHealthy(process, "/readyz", 120_000)
    return process
  }

  const instance = (process: GatewayProcess): Instance => {
    const self: Instance = { process, wsUrl: () => `ws://127.0.0.1:${self.process.port}/telephony/twilio/stream` }
    return self
  }

  const createEnvironment = async (gateway: GatewayProcess) => {
    const agentId = uniqueId("agent")
    const created = await fetch(`${gateway.baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({ name: "fleet tokens" })
    })
    expect(created.status).toBe(201)
    return { agentId, environmentId: ((await created.json()) as { data: { id: string } }).data.id }
  }

  const dialIn = async (gateway: GatewayProcess, env: { agentId: string; environmentId: string }) => {
    const agent = await startSilentAgent({ gatewayUrl: gateway.baseUrl, ...env, apiKey: ADMIN_KEY })
    agents.push(agent)
    await agent.ready()
    return agent
  }

  /** The voice webhook answered by `gateway`: the token and the other stream parameters. */
  const webhook = async (gateway: GatewayProcess, env: { agentId: string; environmentId: string }, callSid: string) => {
    const answer = await postEntryWebhook(entryUrl(gateway.baseUrl, "telephony/twilio/voice", env.agentId, env.environmentId), {
      CallSid: callSid,
      AccountSid: twilioSid("AC"),
      From: "+15550100001",
      To: "+15550100002",
      Direction: "inbound"
    })
    return answer.stream.parameters
  }

  const stream = async (target: Instance, callSid: string, parameters: Record<string, string>) => {
    const call = await connectTwilioStream({ url: target.wsUrl(), callSid, customParameters: parameters })
    calls.push(call)
    return call
  }

  /**
   * Waits until `viewer`'s registry shows `count` idle agents on the instance whose PUBLIC_URL is
   * `on` (its own by default). An instance publishes its idle agents after they connect, and
   * placement reads them from the registry: until then it finds none (docs/scaling.md, "Placement").
   */
  const eventuallyIdle = async (viewer: GatewayProcess, count: number, on = viewer.env.PUBLIC_URL) => {
    for (;;) {
      const entry = (await listInstances(viewer.baseUrl)).find((instance) => instance.publicUrl === on)
      if (entry !== undefined && entry.idleAgents.reduce((sum, env) => sum + env.idle, 0) >= count) return
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }

  const firstCall = (agent: SilentAgent) => new Promise<{ sessionId: string }>((resolve) => agent.once("call", (start) => resolve(start as never)))

  it("a token issued by A opens a stream on B; presented again it is refused on B and on A (1008, logged)", { timeout: 120_000 }, async () => {
    twilio = await startFakeTwilio()
    const [a, b] = (await Promise.all([start("a"), start("b")])).map(instance) as [Instance, Instance]
    const env = await createEnvironment(a.process)
    const agentOnB = await dialIn(b.process, env)
    // Placement on A must see B's agent, or it finds none idle anywhere and the call is rescued.
    await eventuallyIdle(a.process, 1, b.process.env.PUBLIC_URL)
    const callSid = twilioSid("CA")
    const parameters = await webhook(a.process, env, callSid)

    const answered = firstCall(agentOnB)
    const call = await stream(b, callSid, parameters)
    await answered
    await call.hangup()

    // The same start frame again, on either instance: refused before any agent hears it.
    const agentOnA = await dialIn(a.process, env)
    for (const target of [b, a]) {
      const replay = await stream(target, callSid, parameters)
      expect(await replay.closed).toMatchObject({ by: "gateway", code: 1008, reason: "twilio: session token was already used" })
    }
    expect(agentOnB.stats.calls).toBe(1)
    expect(agentOnA.stats.calls).toBe(0)
    for (const target of [a, b]) expect(target.process.stdout()).toContain("its session token was already used")
  })

  it("a token survives a restart of the instance that issued it", { timeout: 120_000 }, async () => {
    twilio = await startFakeTwilio()
    const first = await start("a")
    const env = await createEnvironment(first)
    // Placement reserves this agent; the restart takes it away, and the stream binds to the one
    // that dials in afterwards.
    const before = await dialIn(first, env)
    await eventuallyIdle(first, 1)
    const callSid = twilioSid("CA")
    const parameters = await webhook(first, env, callSid)
    await before.close()

    const port = first.port
    await first.stop("SIGTERM", 10_000)
    const again = instance(await start("a", port))
    const agent = await dialIn(again.process, env)
    const answered = firstCall(agent)
    await stream(again, callSid, parameters)
    await answered
    expect(agent.stats.calls).toBe(1)
  })
})
