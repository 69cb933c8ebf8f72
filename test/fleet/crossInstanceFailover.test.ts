import { afterAll, beforeAll, describe, expect, inject, it } from "vitest"
import { entryUrl, postEntryWebhook, telnyxCallControlId, twilioSid, twilioSignature } from "../../sim/CallEntry.js"
import type { SimCall } from "../../sim/SimCall.js"
import { parseStreamMarkup } from "../../sim/StreamMarkup.js"
import { connectTelnyxStream, placeTelnyxTexmlCall } from "../../sim/TelnyxCall.js"
import { connectTwilioStream } from "../../sim/TwilioCall.js"
import { type FakeTelnyx, startFakeTelnyx } from "../support/fakeTelnyx.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { type GatewayProcess, spawnGateway, waitForHealthy } from "../support/gatewayProcess.js"
import { freePort } from "../support/redisServer.js"
import { ADMIN_KEY, adminAuth, TEST_SECRETS_KEY, uniqueId } from "../support/testApp.js"
import { CA_FILE, type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { openSocket, type Peer, until } from "../livecall/callHarness.js"
import { listInstances } from "./fleetSuite.js"

/**
 * Agent failover across instances (docs/design.md, "The path of a failover"; issue 30, Done when
 * (b)): two callgate processes on one real Redis, carrier REST at a fake Twilio on loopback. The
 * call's agent on A vanishes (socket destroyed); the only idle agent of the environment is on B.
 * A asks the carrier, once, to move the stream to B; the test's carrier does what Twilio does
 * (stops the old stream, opens the new one with the TwiML's parameters); B's agent gets `start`
 * with `resumed` and the `resume` with the checkpoint; the call ends with one session.ended.
 * A Call Control call moves with `streaming_start` on B and `streaming_stop` of the old stream; the
 * test's carrier acts as Telnyx does (closes the old stream and reports streaming.stopped for it,
 * opens the new one on B), and the old stream's stop rescues nothing.
 */
type Kind = "twilio" | "telnyx-texml"

describe("agent failover to an agent on another instance", () => {
  let twilio: FakeTwilio
  let telnyx: FakeTelnyx
  let receiver: Receiver
  let a: GatewayProcess
  let b: GatewayProcess
  const calls: Array<SimCall> = []
  const agents: Array<Peer> = []
  const prefix = `${uniqueId("xfail")}:`

  const start = async (name: string) => {
    const port = await freePort()
    const gateway = await spawnGateway({
      PORT: String(port),
      INSTANCE_ID: name,
      PUBLIC_URL: `http://127.0.0.1:${port}`,
      ADMIN_API_KEY: ADMIN_KEY,
      REDIS_URL: inject("redisUrl"),
      REDIS_KEY_PREFIX: prefix,
      SECRETS_KEY: TEST_SECRETS_KEY,
      // Carrier REST at the fake Twilio; webhooks and stream upgrades signed with its auth token.
      ...twilio.env,
      ...telnyx.env,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
      WEBHOOK_CA_FILE: CA_FILE,
      RATE_LIMIT_PER_MINUTE: "0",
      SHUTDOWN_DRAIN_TIMEOUT: "2s",
      // Debug: the stopped stream of a moved call is ignored with a debug line, the event this test waits for.
      LOG_LEVEL: "debug"
    })
    await waitForHealthy(gateway, "/readyz", 120_000)
    return gateway
  }

  beforeAll(async () => {
    twilio = await startFakeTwilio()
    telnyx = await startFakeTelnyx()
    receiver = await startReceiver()
    ;[a, b] = await Promise.all([start("xfail-a"), start("xfail-b")])
  }, 300_000)

  afterAll(async () => {
    await Promise.all(calls.map((call) => call.hangup().catch(() => {})))
    for (const agent of agents) agent.close()
    await Promise.all([a, b].filter((g) => g !== undefined).map((g) => g.stop("SIGTERM", 10_000)))
    await twilio?.close()
    await telnyx?.close()
    await receiver?.close()
  })

  /** Waits until `viewer`'s registry shows `count` idle agents of the agent on instance `on` (placement reads it from there). */
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

  const endedEvents = (sessionId: string) =>
    receiver.requests
      .map((request) => {
        try {
          return JSON.parse(request.body.toString("utf8")) as { event?: string; sessionId?: string; agentFailovers?: number; status?: string }
        } catch {
          return {}
        }
      })
      .filter((event) => event.event === "session.ended" && event.sessionId === sessionId)

  /** The carrier's live-call updates of the call (Twilio Calls API, TeXML Calls API), and the markup each one asked for. */
  const updatesOf = (kind: Kind, callId: string) => (kind === "twilio" ? twilio.callUpdates(callId) : telnyx.texmlUpdates(callId))
  const markupOf = (request: { readonly form: Record<string, string> | undefined; readonly json: unknown }) =>
    request.form?.Twiml ?? request.form?.Texml ?? (request.json as { Texml?: string } | undefined)?.Texml ?? ""

  it.each([
    ["twilio", "PCMU"],
    ["telnyx-texml", "PCMU"],
    // The environment asks for PCMA; once the call streams in it, the environment is changed to L16: the move asks again for PCMA, the call's own format.
    ["telnyx-texml", "PCMA"]
  ] as const)("%s, %s: the agent on A vanishes, the only idle agent is on B: one call update moves the stream to B, whose agent resumes; one session.ended, agentFailovers 1, no fallback", { timeout: 180_000 }, async (kind, codec) => {
    const agentId = uniqueId("agent")
    const created = await fetch(`${a.baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({
        name: "cross-instance failover",
        webhookUrl: receiver.url("/events"),
        errorFallbackType: "phone",
        errorFallbackValue: "+14155550199",
        agentFailoverTimeout: 10,
        ...(kind === "telnyx-texml" ? { telnyxStreamCodec: codec } : {})
      })
    })
    expect(created.status).toBe(201)
    const environmentId = ((await created.json()) as { data: { id: string } }).data.id

    // The call is placed on A, with A's agent; then the only other agent dials in on B.
    const first = await dialIn(a, agentId, environmentId)
    await idleOn(a, a, agentId, 1)
    const callSid = kind === "twilio" ? twilioSid("CA") : telnyxCallControlId()
    let onA: SimCall
    let firstStream: { readonly url: string; readonly parameters: Readonly<Record<string, string>> }
    if (kind === "twilio") {
      const webhook = { CallSid: callSid, AccountSid: twilioSid("AC"), From: "+15550100001", To: "+15550100002", Direction: "inbound" }
      const url = entryUrl(a.baseUrl, "telephony/twilio/voice", agentId, environmentId)
      const answer = await postEntryWebhook(url, webhook, { "X-Twilio-Signature": twilioSignature(twilio.authToken, url, webhook) })
      firstStream = answer.stream
      onA = await connectTwilioStream({ url: answer.stream.url, callSid, customParameters: answer.stream.parameters, authToken: twilio.authToken })
    } else {
      onA = await placeTelnyxTexmlCall({ gatewayUrl: a.baseUrl, agentId, environmentId, callSid, webhookHeaders: (body) => telnyx.signWebhook(body) })
      firstStream = onA.entry!.stream
    }
    calls.push(onA)
    expect(firstStream.url.startsWith(a.baseUrl.replace(/^http/, "ws"))).toBe(true)
    if (codec !== "PCMU") {
      expect(onA.codec).toBe(codec)
      const changed = await fetch(`${a.baseUrl}/v1/agents/${agentId}/environments/${environmentId}`, {
        method: "PATCH",
        headers: { ...adminAuth, "content-type": "application/json" },
        body: JSON.stringify({ telnyxStreamCodec: "L16;rate=16000" })
      })
      expect(changed.status).toBe(200)
    }
    await first.waitForEvent("start")
    const sessionId = first.events("start")[0].start.customParameters.sessionId as string
    const context = { step: "collect_date", slots: { party: 4 } }
    first.send({ event: "checkpoint", checkpoint: context })
    const second = await dialIn(b, agentId, environmentId)
    await idleOn(a, b, agentId, 1)

    // A's agent vanishes: no close handshake.
    first.ws.terminate()
    await until(() => updatesOf(kind, callSid).length > 0, "the carrier asked to move the stream", 60_000).catch((error) => {
      console.log(a.stdout().split("\n").filter((l) => l.includes(sessionId) || l.includes("failover") || l.includes("move")).join("\n"))
      throw error
    })
    const moved = parseStreamMarkup(markupOf(updatesOf(kind, callSid)[0]!))
    if (kind === "telnyx-texml") expect(moved.attributes).toMatchObject({ codec, bidirectionalCodec: codec, bidirectionalSamplingRate: "8000" })
    const bStreams = `${b.baseUrl.replace(/^http/, "ws")}/telephony/${kind === "twilio" ? "twilio" : "telnyx"}/stream`
    expect(moved.url.split("?")[0]).toBe(bStreams)
    // Its own single-use token, not the first stream's.
    const tokenOf = (stream: { readonly url: string; readonly parameters: Readonly<Record<string, string>> }) =>
      kind === "twilio" ? stream.parameters.token : new URL(stream.url).searchParams.get("token")
    expect(tokenOf(moved)).toBeTruthy()
    expect(tokenOf(moved)).not.toBe(tokenOf(firstStream))

    // The carrier does what Twilio does: the old stream stops, the new one opens on B.
    await onA.hangup("the call's TwiML was updated")
    const onB =
      kind === "twilio"
        ? await connectTwilioStream({ url: moved.url, callSid, customParameters: moved.parameters, authToken: twilio.authToken })
        : await connectTelnyxStream({ url: moved.url, callControlId: callSid, codec })
    calls.push(onB)
    await second.waitForEvent("resume", 1, 60_000)
    expect(second.received.map((m) => m.event).slice(0, 3)).toEqual(["connected", "start", "resume"])
    const startOnB = second.events("start")[0].start
    // Same session, same call as the agent on A was given.
    expect(startOnB.callSid).toBe(first.events("start")[0].start.callSid)
    expect(startOnB.accountSid).toBe(first.events("start")[0].start.accountSid)
    expect(startOnB.customParameters).toMatchObject({ sessionId, resumed: "true", failover: "1" })
    const resume = second.events("resume")[0].resume
    expect(resume).toMatchObject({ checkpoint: context, previousEndReason: "agent_disconnected" })
    expect(Array.isArray(resume.turns)).toBe(true)

    // The call goes on on B: the caller's audio reaches B's agent.
    await second.waitForEvent("media", 5, 60_000)
    await onB.hangup()
    await until(() => endedEvents(sessionId).length > 0, "session.ended", 60_000)
    const [ended] = endedEvents(sessionId)
    expect(ended).toMatchObject({ status: "completed", agentFailovers: 1 })
    // Exactly one carrier request (the move): no fallback transfer.
    expect(updatesOf(kind, callSid)).toHaveLength(1)
    const record = (await (await fetch(`${b.baseUrl}/v1/agents/${agentId}/sessions/${sessionId}`, { headers: adminAuth })).json()) as {
      data: { status: string; agentFailovers: number; agentLegs: Array<{ endReason: string; instanceId: string }> }
    }
    expect(record.data).toMatchObject({ status: "completed", agentFailovers: 1 })
    expect(record.data.agentLegs.map((leg) => [leg.endReason, leg.instanceId])).toEqual([
      ["agent_disconnected", "xfail-a"],
      ["caller_hangup", "xfail-b"]
    ])
    // B's session.ended stands alone: A let go without one (a second one would have come by now, since A acted before B).
    expect(endedEvents(sessionId)).toHaveLength(1)
    expect(a.stdout()).toContain("session moved to another instance")
  })
  it("telnyx-call-control: the agent on A vanishes, the only idle agent is on B: streaming_start on B once, streaming_stop of the old stream once; its streaming.stopped rescues nothing; B's agent resumes; one session.ended, agentFailovers 1, no fallback", { timeout: 180_000 }, async () => {
    const agentId = uniqueId("agent")
    const created = await fetch(`${a.baseUrl}/v1/agents/${agentId}/environments`, {
      method: "POST",
      headers: { ...adminAuth, "content-type": "application/json" },
      body: JSON.stringify({
        name: "cross-instance failover, call control",
        webhookUrl: receiver.url("/events"),
        errorFallbackType: "phone",
        errorFallbackValue: "+14155550199",
        agentFailoverTimeout: 10
      })
    })
    expect(created.status).toBe(201)
    const environmentId = ((await created.json()) as { data: { id: string } }).data.id
    const connectionId = "1684641123236054244"
    /** Telnyx's part: a signed Call Control webhook to `gateway`. */
    const postCallControl = async (gateway: GatewayProcess, eventType: string, payload: Record<string, unknown>) => {
      const body = telnyx.callControlEvent(eventType, payload)
      const response = await fetch(`${gateway.baseUrl}/telephony/telnyx/call-control?${new URLSearchParams({ agentId, environmentId }).toString()}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...telnyx.signWebhook(body) },
        body
      })
      await response.text()
      return response.status
    }

    // The call is answered on A, with A's agent, its stream opened as Telnyx opens it; then the only other agent dials in on B.
    const first = await dialIn(a, agentId, environmentId)
    await idleOn(a, a, agentId, 1)
    const callId = telnyxCallControlId()
    expect(await postCallControl(a, "call.initiated", { call_control_id: callId, connection_id: connectionId, from: "+15550100001", to: "+15550100002", direction: "incoming" })).toBe(200)
    await until(() => telnyx.commands(callId, "answer").length > 0, "the answer with the stream", 60_000)
    const answer = telnyx.commands(callId, "answer")[0]!.json as { stream_url: string; stream_auth_token: string; client_state: string }
    expect(answer.stream_url.startsWith(a.baseUrl.replace(/^http/, "ws"))).toBe(true)
    const oldStreamId = crypto.randomUUID()
    const onA = await connectTelnyxStream({ url: answer.stream_url, streamAuthToken: answer.stream_auth_token, callControlId: callId, clientState: answer.client_state, streamId: oldStreamId })
    calls.push(onA)
    await first.waitForEvent("start")
    const sessionId = first.events("start")[0].start.customParameters.sessionId as string
    const context = { step: "collect_date", slots: { party: 4 } }
    first.send({ event: "checkpoint", checkpoint: context })
    const second = await dialIn(b, agentId, environmentId)
    await idleOn(a, b, agentId, 1)

    // A's agent vanishes: no close handshake.
    first.ws.terminate()
    await until(() => telnyx.commands(callId, "streaming_stop").length > 0, "the carrier asked to stop the old stream", 60_000).catch((error) => {
      console.log(a.stdout().split("\n").filter((l) => l.includes(sessionId) || l.includes("failover") || l.includes("move")).join("\n"))
      throw error
    })
    const [started] = telnyx.commands(callId, "streaming_start")
    const start = started!.json as { stream_url: string; stream_auth_token: string; client_state: string; stream_bidirectional_mode: string }
    // To B's stream endpoint, with its own single-use token; the same session in client_state; RTP both ways as the answer asked.
    expect(start.stream_url.split("?")[0]).toBe(`${b.baseUrl.replace(/^http/, "ws")}/telephony/telnyx/stream`)
    expect(new URL(start.stream_url).searchParams.get("token")).toBe(start.stream_auth_token)
    expect(start.stream_auth_token).not.toBe(answer.stream_auth_token)
    expect(start).toMatchObject({ client_state: answer.client_state, stream_bidirectional_mode: "rtp" })
    // The old stream, by its stream_id (without one Telnyx would stop the new stream too); asked after the start.
    expect(telnyx.commands(callId, "streaming_stop")[0]!.json).toMatchObject({ stream_id: oldStreamId })
    expect(started!.receivedAt).toBeLessThanOrEqual(telnyx.commands(callId, "streaming_stop")[0]!.receivedAt)

    // Telnyx's part: the old stream closes and its streaming.stopped comes (to A) before the new stream reaches B.
    await onA.hangup("streaming_stop")
    expect(
      await postCallControl(a, "streaming.stopped", { call_control_id: callId, connection_id: connectionId, client_state: answer.client_state, stream_url: answer.stream_url })
    ).toBe(200)
    const onB = await connectTelnyxStream({ url: start.stream_url, streamAuthToken: start.stream_auth_token, callControlId: callId, clientState: start.client_state })
    calls.push(onB)
    await second.waitForEvent("resume", 1, 60_000)
    expect(second.received.map((m) => m.event).slice(0, 3)).toEqual(["connected", "start", "resume"])
    const startOnB = second.events("start")[0].start
    expect(startOnB.callSid).toBe(first.events("start")[0].start.callSid)
    expect(startOnB.customParameters).toMatchObject({ sessionId, resumed: "true", failover: "1" })
    expect(second.events("resume")[0].resume).toMatchObject({ checkpoint: context, previousEndReason: "agent_disconnected" })
    // A looked at the old stream's stop once B held the session, and let it be.
    await until(() => a.stdout().includes("a stopped stream of a session that moved to another instance: ignored"), "the old stream's stop ignored", 60_000)

    // The call goes on on B: the caller's audio reaches B's agent; then the caller hangs up.
    await second.waitForEvent("media", 5, 60_000)
    await onB.hangup()
    await until(() => endedEvents(sessionId).length > 0, "session.ended", 60_000)
    const [ended] = endedEvents(sessionId)
    expect(ended).toMatchObject({ status: "completed", agentFailovers: 1 })
    // The carrier was asked for the answer and the move's two commands, each once: no fallback, no rescue.
    expect(telnyx.commands(callId).map((r) => r.path.split("/").pop())).toEqual(["answer", "streaming_start", "streaming_stop"])
    const record = (await (await fetch(`${b.baseUrl}/v1/agents/${agentId}/sessions/${sessionId}`, { headers: adminAuth })).json()) as {
      data: { status: string; endReason: string; agentFailovers: number; agentLegs: Array<{ endReason: string; instanceId: string }> }
    }
    expect(record.data).toMatchObject({ status: "completed", endReason: "caller_hangup", agentFailovers: 1 })
    expect(record.data.agentLegs.map((leg) => [leg.endReason, leg.instanceId])).toEqual([
      ["agent_disconnected", "xfail-a"],
      ["caller_hangup", "xfail-b"]
    ])
    expect(endedEvents(sessionId)).toHaveLength(1)
    expect(a.stdout()).toContain("session moved to another instance")
    // Nothing live anywhere: A let go of the moved call, B ended it.
    const activeOn = async (gateway: GatewayProcess) => /^callgate_sessions_active(\{[^}]*\})? 0$/m.test(await (await fetch(`${gateway.baseUrl}/metrics`)).text())
    while (!((await activeOn(a)) && (await activeOn(b)))) await new Promise((resolve) => setTimeout(resolve, 50))
  })
})
