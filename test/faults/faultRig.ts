import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type SilentAgent, startSilentAgent } from "../../examples/agents/silent-agent.js"
import { twilioSid } from "../../sim/CallEntry.js"
import { readStamp } from "../../sim/FrameStamp.js"
import type { SimCall } from "../../sim/SimCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { freePort } from "../support/redisServer.js"
import { ADMIN_KEY, adminAuth, TEST_SECRETS_KEY, uniqueId } from "../support/testApp.js"
import { CA_FILE, type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"

/**
 * The fault-injection rig (docs/reliability.md): one callgate process (`node --import tsx
 * src/main.ts`) on a given Redis, restartable on the same port, instance id and DATA_DIR; a fake
 * Twilio for carrier REST; an HTTPS receiver for session.ended; a dial-in agent that checks every
 * caller frame's stamp, so a lost frame shows as a gap.
 */

/** `npm run test:faults -- --long` sets this: the long outages run too. */
export const LONG = process.env.CALLGATE_FAULTS_LONG === "1"

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Polls `read` until `check` holds; the failure names what was awaited and the last value. */
export const until = async <A>(read: () => Promise<A> | A, check: (value: A) => boolean, what: string, timeoutMs = 60_000): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (check(value)) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(value).slice(0, 500)})`)
    await sleep(50)
  }
}

export interface LiveCall {
  readonly index: number
  readonly callSid: string
  readonly call: SimCall
}

export interface Rig {
  readonly twilio: FakeTwilio
  readonly receiver: Receiver
  readonly agentId: string
  readonly environmentId: string
  gateway: GatewayProcess
  /** Starts the gateway again (same port, instance id and DATA_DIR) and waits until it is ready. */
  readonly restart: () => Promise<GatewayProcess>
  /** Places `count` Twilio calls, each picked up by the agent, streaming stamped frames. */
  readonly placeCalls: (count: number) => Promise<Array<LiveCall>>
  /** Caller frames the agent received, by call index: the stamps' sequence numbers. */
  readonly received: Map<number, Array<number>>
  /** Agent frames the caller received, by call index: the stamps' sequence numbers (the agent streams stamped silence). */
  readonly receivedByCaller: Map<number, Array<number>>
  /** session.ended payloads the receiver got, in order. */
  readonly endedEvents: () => Array<{ sessionId: string; status: string; endReason?: string; callId: string }>
  readonly sessions: () => Promise<Array<{ id: string; status: string; endReason: string | null; callId: string; instanceId?: string }>>
  readonly close: () => Promise<void>
}

/** Records the stamped caller frames `agent` receives, by the stamp's call id, into `into`. */
export const recordCallerStamps = (agent: SilentAgent, into: Map<number, Array<number>>): void => {
  agent.on("callerMedia", (audio) => {
    const stamp = readStamp(audio)
    if (stamp === undefined) return
    let seqs = into.get(stamp.callId)
    if (seqs === undefined) into.set(stamp.callId, (seqs = []))
    seqs.push(stamp.seq)
  })
}

/**
 * Frames missing between the first and last the receiver got, and after the last up to `sent`
 * (for agent frames, whose sender's count the test does not see: the last received).
 */
export const framesLost = (received: ReadonlyArray<number> | undefined, sent: number): number => {
  if (received === undefined || received.length === 0) return sent
  const seen = new Set(received)
  const first = Math.min(...received)
  let lost = 0
  for (let seq = first; seq <= sent; seq++) if (!seen.has(seq)) lost++
  return lost
}

export const startRig = async (
  redisUrl: string,
  env: Record<string, string> = {},
  options: { readonly reply?: Parameters<typeof startReceiver>[0] } = {}
): Promise<Rig> => {
  const twilio = await startFakeTwilio()
  const receiver = await startReceiver(options.reply)
  const port = await freePort()
  const baseUrl = `http://127.0.0.1:${port}`
  const gatewayEnv: Record<string, string> = {
    ADMIN_API_KEY: ADMIN_KEY,
    // "": the store is named by `env` (REDIS_SENTINELS or REDIS_CLUSTER_NODES).
    ...(redisUrl === "" ? {} : { REDIS_URL: redisUrl }),
    SECRETS_KEY: TEST_SECRETS_KEY,
    REDIS_KEY_PREFIX: `${uniqueId("f")}:`,
    INSTANCE_ID: uniqueId("faults"),
    DATA_DIR: mkdtempSync(join(tmpdir(), "callgate-faults-")),
    PORT: String(port),
    PUBLIC_URL: baseUrl,
    ...twilio.env,
    RATE_LIMIT_PER_MINUTE: "0",
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    WEBHOOK_CA_FILE: CA_FILE,
    WEBHOOK_RETRY_SCHEDULE: "1s,1s,2s,5s,5s,5s,5s,5s,5s",
    SHUTDOWN_DRAIN_TIMEOUT: "1s",
    LOG_LEVEL: "info",
    ...env
  }
  const launch = async () => {
    const gateway = await spawnGateway(gatewayEnv)
    await waitForHealthy(gateway, "/readyz", 90_000)
    return gateway
  }
  const agents: Array<SilentAgent> = []
  const received = new Map<number, Array<number>>()
  const receivedByCaller = new Map<number, Array<number>>()
  const rig: Rig = {
    twilio,
    receiver,
    agentId: uniqueId("agent"),
    environmentId: "",
    gateway: await launch(),
    restart: async () => {
      rig.gateway = await launch()
      return rig.gateway
    },
    received,
    receivedByCaller,
    placeCalls: async (count) => {
      const agent = await startSilentAgent({
        gatewayUrl: baseUrl,
        agentId: rig.agentId,
        environmentId: rig.environmentId,
        apiKey: ADMIN_KEY,
        capacity: count,
        // Stamped silence towards every caller, so a lost agent frame shows as a gap too.
        stream: "silence",
        stampFrames: true
      })
      agents.push(agent)
      recordCallerStamps(agent, received)
      await agent.ready(60_000)
      const calls: Array<LiveCall> = []
      for (let index = 0; index < count; index++) {
        const callSid = twilioSid("CA")
        const call = await placeTwilioCall({
          gatewayUrl: baseUrl,
          agentId: rig.agentId,
          environmentId: rig.environmentId,
          callSid,
          authToken: twilio.authToken,
          stampCallId: index + 1
        })
        const seqs: Array<number> = []
        receivedByCaller.set(index + 1, seqs)
        call.on("agentMedia", ({ payload }) => {
          const stamp = readStamp(payload)
          if (stamp !== undefined) seqs.push(stamp.seq)
        })
        calls.push({ index: index + 1, callSid, call })
      }
      // Every call is connected: the agent hears each one's frames, and each caller the agent's.
      await until(() => received.size, (n) => n === count, "caller frames at the agent on every call")
      await until(() => calls.filter(({ index }) => receivedByCaller.get(index)!.length > 0).length, (n) => n === count, "agent frames at every caller")
      return calls
    },
    endedEvents: () =>
      receiver.requests.map((request) => JSON.parse(request.body.toString("utf8"))).filter((event) => event.event === "session.ended"),
    sessions: async () => {
      const res = await fetch(`${rig.gateway.baseUrl}/v1/agents/${rig.agentId}/sessions?limit=100`, { headers: adminAuth })
      if (res.status !== 200) throw new Error(`sessions: HTTP ${res.status} ${await res.text()}`)
      return ((await res.json()) as any).data.sessions
    },
    close: async () => {
      await Promise.all(agents.map((agent) => agent.close()))
      await rig.gateway.stop("SIGKILL")
      await twilio.close()
      await receiver.close()
    }
  }
  const created = await fetch(`${baseUrl}/v1/agents/${rig.agentId}/environments`, {
    method: "POST",
    headers: { ...adminAuth, "content-type": "application/json" },
    body: JSON.stringify({ name: "faults", webhookUrl: receiver.url("/events") })
  })
  if (created.status !== 201) throw new Error(`environment: HTTP ${created.status} ${await created.text()}`)
  ;(rig as { environmentId: string }).environmentId = ((await created.json()) as any).data.id
  return rig
}

/**
 * One instance of a fleet on a shared Redis (`prefix` keeps the fleet's keys apart from other
 * tests'), behind one public address, with its own instance id and DATA_DIR; resolves once ready.
 */
export const startFleetInstance = async (options: {
  readonly name: string
  readonly prefix: string
  readonly redisUrl: string
  readonly publicUrl: string
  readonly twilio: FakeTwilio
  /** The instance id as given (behind nginx it names the instance's /i/{id}/ route); default `name` made unique. */
  readonly instanceId?: string
  /** More variables (FLEET_URL, PORT, the fake Telnyx's, INSTANCE_TTL), or overrides. */
  readonly env?: Record<string, string>
}): Promise<GatewayProcess> => {
  const gateway = await spawnGateway({
    ADMIN_API_KEY: ADMIN_KEY,
    REDIS_URL: options.redisUrl,
    SECRETS_KEY: TEST_SECRETS_KEY,
    REDIS_KEY_PREFIX: options.prefix,
    INSTANCE_ID: options.instanceId ?? uniqueId(options.name),
    DATA_DIR: mkdtempSync(join(tmpdir(), "callgate-fleet-")),
    PUBLIC_URL: options.publicUrl,
    ...options.twilio.env,
    RATE_LIMIT_PER_MINUTE: "0",
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    WEBHOOK_CA_FILE: CA_FILE,
    LOG_LEVEL: "info",
    ...options.env
  })
  await waitForHealthy(gateway, "/readyz", 90_000)
  return gateway
}
