import { mkdtempSync, readdirSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import S3rver from "s3rver"
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest"
import { entryUrl, postEntryWebhook, twilioSid, twilioSignature } from "../../sim/CallEntry.js"
import { MULAW_TO_LINEAR } from "../../sim/Mulaw.js"
import type { SimCall } from "../../sim/SimCall.js"
import { parseStreamMarkup } from "../../sim/StreamMarkup.js"
import { connectTwilioStream } from "../../sim/TwilioCall.js"
import { parseWav } from "../../src/recording/Wav.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { freePort } from "../support/redisServer.js"
import { ADMIN_KEY, adminAuth, TEST_SECRETS_KEY, uniqueId } from "../support/testApp.js"
import { CA_FILE, type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { openSocket, type Peer, until } from "../livecall/callHarness.js"
import { listInstances } from "./fleetSuite.js"

/**
 * A recorded call moved to another instance by an agent failover (docs/recording.md, "A call that
 * moves"; issue 34 with issue 30): two callgate processes on one real Redis, each recording its
 * stream of the call as a part of its own, on a shared RECORDINGS_DIR or in one S3 bucket (a real
 * S3-protocol server on loopback, each instance with a disk of its own). The recording served by
 * /v1, from either instance, is one WAV covering the whole call: the caller's audio of the first
 * stream, sample for sample at its time, then the caller's audio of the second, later and in order.
 */
const FRAME = 160

const pcmOf = (payload: string) => Array.from(Buffer.from(payload, "base64"), (byte) => MULAW_TO_LINEAR[byte]!)
/** A frame with speech in it (the simulator's idle frames are mu-law silence, all samples near zero). */
const speaks = (payload: string) => pcmOf(payload).some((sample) => Math.abs(sample) > 200)
const callerAt = (samples: Int16Array, from: number, length: number) => Array.from({ length }, (_, i) => samples[(from + i) * 2] ?? Number.NaN)

/** The pauses in the sidecar of the session's part that `gateway` writes (its own RECORDINGS_DIR): the first part's, or a later one's. */
const sidecarPauses = (gateway: GatewayProcess, agentId: string, sessionId: string, later: boolean) => {
  try {
    const folder = join(gateway.env.RECORDINGS_DIR!, agentId, ...(later ? [`${sessionId}.parts`] : []))
    const name = readdirSync(folder).find((file) => (later ? file.endsWith(".json") : file === `${sessionId}.json`))
    if (name === undefined) return undefined
    return (JSON.parse(readFileSync(join(folder, name), "utf8")) as { pauses: Array<{ startMs: number; endMs: number | null }> }).pauses
  } catch {
    return undefined
  }
}

type Store = "shared RECORDINGS_DIR" | "S3 bucket"

describe.each<Store>(["shared RECORDINGS_DIR", "S3 bucket"])("a recorded call moved between instances (%s)", (store) => {
  let twilio: FakeTwilio
  let receiver: Receiver
  let s3rver: S3rver | undefined
  let a: GatewayProcess
  let b: GatewayProcess
  const calls: Array<SimCall> = []
  const agents: Array<Peer> = []
  const prefix = `${uniqueId("recmove")}:`
  const sharedDir = mkdtempSync(join(tmpdir(), "callgate-recordings-"))

  const start = async (name: string, storage: Record<string, string>) => {
    const port = await freePort()
    const gateway = await spawnGateway({
      PORT: String(port),
      INSTANCE_ID: name,
      PUBLIC_URL: `http://127.0.0.1:${port}`,
      ADMIN_API_KEY: ADMIN_KEY,
      REDIS_URL: inject("redisUrl"),
      REDIS_KEY_PREFIX: prefix,
      SECRETS_KEY: TEST_SECRETS_KEY,
      ...twilio.env,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
      WEBHOOK_CA_FILE: CA_FILE,
      RATE_LIMIT_PER_MINUTE: "0",
      SHUTDOWN_DRAIN_TIMEOUT: "2s",
      LOG_LEVEL: "info",
      ...storage
    })
    await waitForHealthy(gateway, "/readyz", 90_000)
    return gateway
  }

  beforeAll(async () => {
    twilio = await startFakeTwilio()
    receiver = await startReceiver()
    let storage: (name: string) => Record<string, string> = () => ({ RECORDINGS_DIR: sharedDir })
    if (store === "S3 bucket") {
      s3rver = new S3rver({
        port: 0,
        address: "127.0.0.1",
        silent: true,
        directory: mkdtempSync(join(tmpdir(), "callgate-s3-")),
        configureBuckets: [{ name: "recordings", configs: [] }]
      })
      const { port } = await s3rver.run()
      // Each instance has a disk of its own: the bucket is all they share.
      storage = () => ({
        RECORDINGS_DIR: mkdtempSync(join(tmpdir(), "callgate-recordings-")),
        RECORDINGS_S3_URL: `http://127.0.0.1:${port}/recordings/calls`,
        AWS_REGION: "us-east-1",
        AWS_ACCESS_KEY_ID: "S3RVER",
        AWS_SECRET_ACCESS_KEY: "S3RVER"
      })
    }
    ;[a, b] = await Promise.all([start(`recmove-a-${store.length}`, storage("a")), start(`recmove-b-${store.length}`, storage("b"))])
  }, 180_000)

  afterAll(async () => {
    await Promise.all(calls.map((call) => call.hangup().catch(() => {})))
    for (const agent of agents) agent.close()
    await Promise.all([a, b].filter((g) => g !== undefined).map((g) => g.stop("SIGTERM", 10_000)))
    await twilio?.close()
    await receiver?.close()
    await s3rver?.close()
  })

  const idleOn = async (viewer: GatewayProcess, on: GatewayProcess, agentId: string, count: number) => {
    for (;;) {
      const entry = (await listInstances(viewer.baseUrl)).find((instance) => instance.publicUrl === on.env.PUBLIC_URL)
      const idle = entry?.idleAgents.filter((e) => e.agentId === agentId).reduce((sum, e) => sum + e.idle, 0) ?? 0
      if (idle === count) return
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }

  const dialIn = async (gateway: GatewayProcess, agentId: string, environmentId: string) => {
    const agent = await openSocket(`${gateway.baseUrl.replace(/^http/, "ws")}/v1/agents/${agentId}/environments/${environmentId}/connect`, {
      authorization: `Bearer ${ADMIN_KEY}`
    })
    agents.push(agent)
    return agent
  }

  interface Ended {
    readonly event?: string
    readonly sessionId?: string
    readonly recording?: { readonly url: string; readonly durationMs: number; readonly pauses: ReadonlyArray<{ startMs: number; endMs: number }> }
  }
  const endedEvents = (sessionId: string) =>
    receiver.requests
      .map((request): Ended => {
        try {
          return JSON.parse(request.body.toString("utf8")) as Ended
        } catch {
          return {}
        }
      })
      .filter((event) => event.event === "session.ended" && event.sessionId === sessionId)

  const mediaOf = (agent: Peer) => agent.events("media").map((m) => m.media.payload as string)

  it("one recording, served by either instance: the caller's audio of both streams in order, a pause that moved with the call, the pauses of the whole", { timeout: 240_000 }, async () => {
    const agentId = uniqueId("agent")
    const created = await fetch(`${a.baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({ name: "recorded failover", webhookUrl: receiver.url("/events"), recording: "on", agentFailoverTimeout: 10 })
    })
    expect(created.status).toBe(201)
    const environmentId = ((await created.json()) as { data: { id: string } }).data.id

    // The call on A, with A's agent; the caller speaks (a real-time stream: frame k at k * 20 ms).
    const first = await dialIn(a, agentId, environmentId)
    await idleOn(a, a, agentId, 1)
    const callSid = twilioSid("CA")
    const webhook = { CallSid: callSid, AccountSid: twilioSid("AC"), From: "+15550100001", To: "+15550100002", Direction: "inbound" }
    const url = entryUrl(a.baseUrl, "telephony/twilio/voice", agentId, environmentId)
    const answer = await postEntryWebhook(url, webhook, { "X-Twilio-Signature": twilioSignature(twilio.authToken, url, webhook) })
    const onA = await connectTwilioStream({ url: answer.stream.url, callSid, customParameters: answer.stream.parameters, authToken: twilio.authToken })
    calls.push(onA)
    await first.waitForEvent("start")
    const sessionId = first.events("start")[0].start.customParameters.sessionId as string
    await onA.play(readFileSync(new URL("../fixtures/audio/caller-appointment.ulaw", import.meta.url)))
    await until(() => mediaOf(first).filter(speaks).length >= 50, "the caller's speech reached A's agent", 60_000)
    const second = await dialIn(b, agentId, environmentId)
    await idleOn(a, b, agentId, 1)

    // What A's agent heard is what A recorded, from the stream's start. Then A's agent pauses the
    // recording (the caller goes on speaking) and vanishes: the call moves while paused.
    const heardOnA = mediaOf(first)
    first.send({ event: "recording", recording: { paused: true } })
    await until(() => sidecarPauses(a, agentId, sessionId, false)?.length === 1, "A's part paused", 60_000)
    first.ws.terminate()
    await until(() => twilio.callUpdates(callSid).length > 0, "the carrier asked to move the stream", 60_000)
    const moved = parseStreamMarkup(twilio.callUpdates(callSid)[0]!.form?.Twiml ?? "")
    await onA.hangup("the call's TwiML was updated")
    const onB = await connectTwilioStream({ url: moved.url, callSid, customParameters: moved.parameters, authToken: twilio.authToken })
    calls.push(onB)
    await second.waitForEvent("resume", 1, 60_000)

    // B's part starts paused (the pause moved with the call) until B's agent resumes it.
    await until(() => sidecarPauses(b, agentId, sessionId, true)?.[0]?.startMs === 0, "B's part paused from its start", 60_000)
    second.send({ event: "recording", recording: { paused: false } })
    await until(() => typeof sidecarPauses(b, agentId, sessionId, true)?.[0]?.endMs === "number", "B's part resumed", 60_000)

    // On B the caller says something else; then B's agent pauses the recording for a while.
    await onB.play(readFileSync(new URL("../fixtures/audio/caller-account.ulaw", import.meta.url)))
    await until(() => mediaOf(second).filter(speaks).length >= 50, "the caller's speech reached B's agent", 60_000)
    const heardOnB = mediaOf(second)
    second.send({ event: "recording", recording: { paused: true } })
    await second.waitForEvent("media", heardOnB.length + 25, 60_000)
    second.send({ event: "recording", recording: { paused: false } })
    await second.waitForEvent("media", heardOnB.length + 50, 60_000)
    await onB.hangup()
    await until(() => endedEvents(sessionId).length > 0, "session.ended", 60_000)
    const [ended] = endedEvents(sessionId)

    // Each stream wrote a part of its own (the second never replaced the first).
    if (store === "shared RECORDINGS_DIR") {
      expect(readdirSync(join(sharedDir, agentId)).filter((name) => name.startsWith(`${sessionId}.`)).sort()).toEqual(
        [`${sessionId}.json`, `${sessionId}.parts`, `${sessionId}.wav`]
      )
      expect(readdirSync(join(sharedDir, agentId, `${sessionId}.parts`)).filter((name) => name.endsWith(".wav"))).toHaveLength(1)
    }

    for (const gateway of [b, a]) {
      const served = await fetch(`${gateway.baseUrl}/v1/agents/${agentId}/sessions/${sessionId}/recording`, { headers: adminAuth })
      expect(served.status).toBe(200)
      const file = Buffer.from(await served.arrayBuffer())
      expect(Number(served.headers.get("content-length"))).toBe(file.length)
      const { samples, sampleRate, channels } = parseWav(file)
      expect([sampleRate, channels]).toEqual([8000, 2])
      const total = samples.length / 2
      expect(file.readUInt32LE(40)).toBe(total * 4)
      expect(ended?.recording?.durationMs).toBe(Math.round((total / 8000) * 1000))

      // The first stream's part: every frame A's agent heard, sample for sample, at its own time.
      heardOnA.forEach((payload, k) => expect(callerAt(samples, k * FRAME, FRAME), `A's frame ${k}`).toEqual(pcmOf(payload)))

      // The second stream's part, after it: its first spoken frame is found past the first part's
      // audio, and every frame B's agent heard follows it at 20 ms steps.
      const firstSpoken = heardOnB.findIndex(speaks)
      const wanted = pcmOf(heardOnB[firstSpoken]!)
      let at = -1
      for (let position = heardOnA.length * FRAME; position + FRAME <= total && at < 0; position++) {
        if (samples[position * 2] === wanted[0] && callerAt(samples, position, FRAME).every((sample, i) => sample === wanted[i])) at = position
      }
      expect(at, "B's speech in the recording").toBeGreaterThan(0)
      const bStart = at - firstSpoken * FRAME
      expect(bStart).toBeGreaterThanOrEqual(heardOnA.length * FRAME)
      heardOnB.forEach((payload, k) => expect(callerAt(samples, bStart + k * FRAME, FRAME), `B's frame ${k}`).toEqual(pcmOf(payload)))
      // The whole call: both streams' audio, and B's pause after it, inside the recording.
      expect(total).toBeGreaterThanOrEqual(bStart + (heardOnB.length + 50) * FRAME)

      // The pauses on the whole's timeline (whole milliseconds: a bound is off by up to one ms, 8
      // samples, either way). The first: from A's agent's pause, across the move, into B's part
      // until B's agent resumed; silent although the caller spoke on A meanwhile.
      const pauses = ended!.recording!.pauses
      expect(pauses).toHaveLength(2)
      const [held, pause] = pauses
      expect(held!.startMs * 8).toBeGreaterThanOrEqual(heardOnA.length * FRAME - 8)
      expect(held!.endMs * 8).toBeGreaterThanOrEqual(bStart)
      expect(callerAt(samples, held!.startMs * 8 + 8, (held!.endMs - held!.startMs) * 8 - 16).every((sample) => sample === 0)).toBe(true)
      // The second: the pause B's agent asked for later, after what B's agent had heard, silent.
      expect(pause!.startMs * 8).toBeGreaterThanOrEqual(bStart + heardOnB.length * FRAME - 8)
      expect(pause!.endMs - pause!.startMs).toBeGreaterThanOrEqual(100)
      expect(callerAt(samples, pause!.startMs * 8 + 8, (pause!.endMs - pause!.startMs) * 8 - 16).every((sample) => sample === 0)).toBe(true)
    }
    expect(endedEvents(sessionId)).toHaveLength(1)
  })
})
