import { context as otelContext, SpanKind } from "@opentelemetry/api"
import { W3CTraceContextPropagator } from "@opentelemetry/core"
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto"
import { BasicTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type AnsweringAgent, startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import type { CallStart } from "../../examples/agents/agent-runtime.js"
import { callTraceIds } from "../../src/observability/Tracing.js"
import { readUlawFile, speechLike } from "../../sim/AudioSource.js"
import { twilioSid } from "../../sim/CallEntry.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import type { SimCall } from "../../sim/SimCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type Gateway, startGateway, until } from "../livecall/callHarness.js"
import { type OtlpReceiver, type ReceivedSpan, startOtlpReceiver } from "../support/otlpReceiver.js"
import { ADMIN_KEY, adminAuth, uniqueId } from "../support/testApp.js"
import { type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { testWebhookSettings } from "../webhooks/webhookRuntime.js"

/**
 * Traces over OTLP/HTTP, end to end: callgate as main.ts wires it, exporting to an OTLP receiver on
 * loopback with the SDK's real exporter (protobuf, the default protocol). One call through the
 * Twilio entry webhook, two caller turns answered by the example agent, then the agent's `error`:
 * the webhook fallback rescues the call, and `session.ended` is delivered. The spans must form the
 * call's tree under the session span, and a span the agent makes from `traceparent` must join it.
 */

const PUBLIC_URL = "https://callgate.test"
const FALLBACK_TWIML = `<?xml version="1.0" encoding="UTF-8"?><Response><Say>Sorry.</Say><Hangup/></Response>`
const greeting = readUlawFile("examples/agents/audio/agent-greeting.ulaw")
const reply = greeting.subarray(5 * FRAME_BYTES, 45 * FRAME_BYTES)

describe("OpenTelemetry traces of a call", () => {
  let otlp: OtlpReceiver
  let hooks: Receiver
  let gateway: Gateway
  let agent: AnsweringAgent | undefined
  let call: SimCall | undefined

  beforeAll(async () => {
    otlp = await startOtlpReceiver()
    hooks = await startReceiver((request) =>
      request.path.startsWith("/fallback") ? { status: 200, headers: { "content-type": "text/xml" }, body: FALLBACK_TWIML } : { status: 200 }
    )
    gateway = await startGateway({
      env: {
        ...testWebhookSettings,
        OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
        OTEL_TRACES_SAMPLER: "always_on",
        OTEL_BSP_SCHEDULE_DELAY: "50",
        OTEL_SERVICE_NAME: "callgate-test"
      }
    })
  })
  afterAll(async () => {
    await call?.hangup()
    await agent?.close()
    await gateway.close()
    await Promise.all([otlp.close(), hooks.close()])
  })

  const spansOf = (traceId: string) => otlp.spans.filter((span) => span.traceId === traceId)
  const named = (spans: ReadonlyArray<ReceivedSpan>, name: string) => spans.filter((span) => span.name === name)

  it("exports the span tree of a two-turn call with a rescue, and joins the agent's span through traceparent", async () => {
    const agentId = uniqueId("agent")
    const { id: environmentId } = await gateway.createEnvironment(agentId, {
      webhookUrl: hooks.url("/events"),
      errorFallbackType: "webhook",
      errorFallbackValue: hooks.url("/fallback"),
      // The agent's `error` is rescued at once: with agent failover on, the example agent (which keeps a dial-in
      // socket open, so one is idle again after the error) would take the call back and nothing would be rescued
      // (docs/reliability.md, "Agent failover").
      agentFailoverTimeout: 0
    })
    agent = await startAnsweringAgent({ gatewayUrl: gateway.httpBase, agentId, environmentId, apiKey: ADMIN_KEY, reply, responseLatencyMs: 100, errorAfterTurns: 2 })
    await agent.ready()
    const started = new Promise<CallStart>((resolve) => agent!.once("call", resolve))
    const replies: Array<number> = []
    agent.on("reply", (event) => replies.push(event.turn))
    const acted = new Promise<void>((resolve) => agent!.once("action", () => resolve()))

    const callSid = twilioSid("CA")
    call = await placeTwilioCall({
      gatewayUrl: gateway.httpBase,
      agentId,
      environmentId,
      callSid,
      to: "+15550100002",
      streamVia: "gateway",
      authToken: gateway.twilio.authToken,
      publicUrl: PUBLIC_URL
    })
    const start = await started
    const sessionId = start.customParameters.sessionId!
    const ids = callTraceIds(sessionId)
    // The agent is handed the session span's context, sampled.
    expect(start.customParameters.traceparent).toBe(`00-${ids.traceId}-${ids.spanId}-01`)

    await call.play(speechLike({ durationMs: 1600 }))
    await until(() => replies.length >= 1, "the agent's first reply")
    await call.play(speechLike({ durationMs: 1600 }))
    await acted
    await until(() => hooks.requests.some((r) => r.path.startsWith("/events") && r.body.toString().includes(sessionId)), "session.ended delivered")

    // The agent's own span, made by the OpenTelemetry SDK from the traceparent it was given.
    const provider = new BasicTracerProvider({
      spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: `${otlp.endpoint}/v1/traces` }))]
    })
    const remote = new W3CTraceContextPropagator().extract(otelContext.active(), { traceparent: start.customParameters.traceparent }, {
      get: (carrier, key) => carrier[key as keyof typeof carrier],
      keys: (carrier) => Object.keys(carrier)
    })
    const agentSpan = provider.getTracer("agent").startSpan("agent.llm", { kind: SpanKind.CLIENT }, remote)
    agentSpan.end()
    await provider.forceFlush()
    await provider.shutdown()

    const stored = ((await (await fetch(`${gateway.httpBase}/v1/agents/${agentId}/sessions/${sessionId}`, { headers: adminAuth })).json()) as any).data
    expect(stored).toMatchObject({ status: "failed", fallback: { type: "webhook", outcome: "markup_applied" } })
    const answered = stored.turns.filter((turn: any) => turn.latencyMs !== null)
    expect(answered.length).toBeGreaterThanOrEqual(2)

    const want = ["callgate.session", "callgate.admission", "callgate.placement", "callgate.agent.leg", "callgate.rescue", "callgate.webhook.delivery", "agent.llm"]
    await until(() => want.every((name) => named(spansOf(ids.traceId), name).length > 0), "every span of the call's trace", 30_000)
    await until(() => named(spansOf(ids.traceId), "callgate.turn").length >= answered.length, "the turn spans")
    const spans = spansOf(ids.traceId)

    // The session span: the root, with the ids the session id gives, and the session's attributes.
    const [root] = named(spans, "callgate.session")
    expect(root).toMatchObject({
      spanId: ids.spanId,
      parentSpanId: "",
      kind: 2,
      contentType: "application/x-protobuf",
      attributes: {
        "callgate.session.id": sessionId,
        "callgate.agent.id": agentId,
        "callgate.environment.id": environmentId,
        "callgate.provider": "twilio",
        "callgate.direction": "inbound",
        "callgate.call.id": callSid,
        "callgate.session.status": "failed",
        "callgate.session.end_reason": stored.endReason
      }
    })
    expect(root!.resource["service.name"]).toBe("callgate-test")
    // Every callgate.* step of the call is a child of the session span; the service spans inside a
    // step (Effect.fn, e.g. the breaker's entry decision inside admission) hang under a span of the trace.
    const inTrace = new Set(spans.map((s) => s.spanId))
    for (const span of spans.filter((s) => s !== root)) {
      if (span.name.startsWith("callgate.") || span.name === "agent.llm") {
        expect({ name: span.name, parent: span.parentSpanId }).toEqual({ name: span.name, parent: ids.spanId })
      } else expect({ name: span.name, parentInTrace: inTrace.has(span.parentSpanId) }).toEqual({ name: span.name, parentInTrace: true })
    }

    expect(named(spans, "callgate.admission")[0]!.attributes).toMatchObject({ "callgate.admission.outcome": "Admitted", "callgate.session.id": sessionId })
    expect(named(spans, "callgate.placement")[0]!.attributes["callgate.placement.agent"]).toBe("Reserved")
    expect(named(spans, "callgate.agent.leg")[0]!.attributes).toMatchObject({ "callgate.agent.mode": "dial_in", "callgate.agent.outcome": "connected" })

    // One span per answered turn, with the latency the session record shows.
    const turnSpans = named(spans, "callgate.turn")
    for (const turn of answered) {
      const span = turnSpans.find((s) => s.attributes["callgate.turn.index"] === turn.index)
      expect(span?.attributes).toMatchObject({
        "callgate.turn.input": "speech",
        "callgate.turn.latency_ms": turn.latencyMs,
        "callgate.turn.caller_ended_at": turn.callerEndedAt,
        "callgate.turn.agent_responded_at": turn.agentRespondedAt
      })
      expect(span!.endNs).toBeGreaterThan(span!.startNs)
    }

    const [rescue] = named(spans, "callgate.rescue")
    expect(rescue!.attributes).toMatchObject({
      "callgate.rescue.trigger": stored.fallback.trigger,
      "callgate.rescue.type": "webhook",
      "callgate.rescue.outcome": "markup_applied",
      "callgate.rescue.carrier_request": "applyTwiml"
    })
    // The fallback webhook and the session.ended delivery name their own spans in `traceparent`.
    const fallbackRequest = hooks.requests.find((r) => r.path.startsWith("/fallback"))!
    expect(fallbackRequest.headers.traceparent).toBe(`00-${ids.traceId}-${rescue!.spanId}-01`)
    const delivery = named(spans, "callgate.webhook.delivery").find((s) => s.attributes["callgate.delivery.outcome"] === "delivered")!
    expect(delivery).toMatchObject({ kind: 3, attributes: { "callgate.delivery.attempt": 1, "http.response.status_code": 200 } })
    const event = hooks.requests.find((r) => r.path.startsWith("/events") && r.body.toString().includes(sessionId))!
    expect(event.headers.traceparent).toBe(`00-${ids.traceId}-${delivery.spanId}-01`)

    // The agent's span joined the call's trace under the session span.
    expect(named(spans, "agent.llm")[0]).toMatchObject({ kind: 3, parentSpanId: ids.spanId })
  })
})
