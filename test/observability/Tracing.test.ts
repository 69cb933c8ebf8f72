import { ConfigProvider, Effect, Exit, Logger, LogLevel, Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { jsonLogger } from "../../src/observability/Logging.js"
import {
  callSpan,
  callTraceIds,
  TracingConfig,
  tracingLayer,
  traceparentHeader,
  withCallSpan,
  withSessionSpan
} from "../../src/observability/Tracing.js"
import { type OtlpReceiver, startOtlpReceiver } from "../support/otlpReceiver.js"

/** Runs `effect` under tracingLayer built from `env`, then closes it (the exporter flushes). */
const run = <A, E>(env: Record<string, string>, effect: Effect.Effect<A, E>) =>
  Effect.runPromise(
    effect.pipe(Effect.provide(tracingLayer), Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))) as Effect.Effect<A, E>
  )

const configError = (env: Record<string, string>) =>
  Effect.runPromiseExit(Effect.withConfigProvider(TracingConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))))

const SESSION = "ses_AbCdEfGhIjKlMnOp"

describe("tracing configuration (the standard OTEL_* variables)", () => {
  it("the OTLP endpoint gets /v1/traces; the traces endpoint is used as given; protobuf by default", async () => {
    const general = await Effect.runPromise(Effect.withConfigProvider(TracingConfig, ConfigProvider.fromMap(new Map([["OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"]]))))
    expect(Option.getOrNull(general.url)).toBe("http://collector:4318/v1/traces")
    expect(general.protocol).toBe("http/protobuf")
    const specific = await Effect.runPromise(
      Effect.withConfigProvider(
        TracingConfig,
        ConfigProvider.fromMap(
          new Map([
            ["OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"],
            ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example/custom"],
            ["OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"],
            ["OTEL_EXPORTER_OTLP_HEADERS", "api-key=abc%3D,x-team=voice"]
          ])
        )
      )
    )
    expect(specific).toMatchObject({ protocol: "http/json", headers: { "api-key": "abc=", "x-team": "voice" } })
    expect(Option.getOrNull(specific.url)).toBe("https://traces.example/custom")
    const disabled = await Effect.runPromise(
      Effect.withConfigProvider(TracingConfig, ConfigProvider.fromMap(new Map([["OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"], ["OTEL_SDK_DISABLED", "true"]])))
    )
    expect(disabled.url._tag).toBe("None")
  })

  it.each([
    [{ OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }, "grpc is not supported"],
    [{ OTEL_TRACES_SAMPLER: "sometimes" }, "OTEL_TRACES_SAMPLER"],
    [{ OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "2" }, "OTEL_TRACES_SAMPLER_ARG"],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" }, "OTEL_EXPORTER_OTLP_ENDPOINT"],
    [{ OTEL_EXPORTER_OTLP_HEADERS: "novalue" }, "OTEL_EXPORTER_OTLP_HEADERS"]
  ])("%j is refused at start, naming the variable", async (env, words) => {
    const exit = await configError(env)
    expect(Exit.isFailure(exit)).toBe(true)
    expect(JSON.stringify(exit)).toContain(words)
  })
})

describe("tracing off (no endpoint)", () => {
  it("spans still carry the call's ids, flagged not sampled, for logs and traceparent", async () => {
    const ids = callTraceIds(SESSION)
    const seen = await run(
      {},
      Effect.gen(function* () {
        const session = yield* Effect.currentSpan
        const header = yield* traceparentHeader
        const child = yield* Effect.currentSpan.pipe(Effect.withSpan("child"))
        const parent = yield* callSpan(SESSION)
        return { session, header, child, parent }
      }).pipe(withSessionSpan(SESSION, {}))
    )
    expect(seen.session).toMatchObject({ traceId: ids.traceId, spanId: ids.spanId, sampled: false })
    expect(seen.header).toEqual({ traceparent: `00-${ids.traceId}-${ids.spanId}-00` })
    expect(seen.child.traceId).toBe(ids.traceId)
    expect(seen.child.spanId).not.toBe(ids.spanId)
    expect(seen.parent).toMatchObject({ _tag: "ExternalSpan", traceId: ids.traceId, spanId: ids.spanId, sampled: false })
  })

  it("every log line of a call names its trace, span and session", async () => {
    const lines: Array<string> = []
    await run(
      {},
      Effect.logInfo("turn answered").pipe(
        withCallSpan(SESSION, "callgate.rescue"),
        Effect.annotateLogs({ sessionId: SESSION }),
        Effect.provide(Logger.replace(Logger.defaultLogger, jsonLogger((line) => lines.push(line)))),
        Logger.withMinimumLogLevel(LogLevel.Info)
      )
    )
    expect(JSON.parse(lines[0]!)).toMatchObject({ msg: "turn answered", traceId: callTraceIds(SESSION).traceId, spanId: expect.stringMatching(/^[0-9a-f]{16}$/), sessionId: SESSION })
  })
})

describe("tracing on: OTLP/HTTP", () => {
  let otlp: OtlpReceiver
  beforeAll(async () => {
    otlp = await startOtlpReceiver()
  })
  afterAll(() => otlp.close())

  it("http/json sends OTLP/JSON; the session span has the call's ids and its children name it", async () => {
    const ids = callTraceIds(SESSION)
    await run(
      { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: "http/json", OTEL_EXPORTER_OTLP_COMPRESSION: "gzip" },
      Effect.void.pipe(Effect.withSpan("inner"), withSessionSpan(SESSION, { "callgate.session.id": SESSION }))
    )
    const spans = otlp.spans.filter((s) => s.traceId === ids.traceId)
    expect(spans.map((s) => s.contentType)).toEqual(["application/json", "application/json"])
    expect(spans.find((s) => s.name === "callgate.session")).toMatchObject({ spanId: ids.spanId, parentSpanId: "", attributes: { "callgate.session.id": SESSION } })
    expect(spans.find((s) => s.name === "inner")).toMatchObject({ parentSpanId: ids.spanId })
    expect(spans[0]!.resource["service.name"]).toBe("callgate")
  })

  it("OTEL_TRACES_SAMPLER=always_off: nothing is exported and traceparent says not sampled", async () => {
    const session = "ses_NotSampled000000"
    const header = await run(
      { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint, OTEL_TRACES_SAMPLER: "always_off" },
      traceparentHeader.pipe(withSessionSpan(session, {}))
    )
    const ids = callTraceIds(session)
    expect(header).toEqual({ traceparent: `00-${ids.traceId}-${ids.spanId}-00` })
    // The provider was shut down (flushed) when the layer closed: whatever was sampled has arrived.
    expect(otlp.spans.filter((s) => s.traceId === ids.traceId)).toEqual([])
  })

  it("traceidratio: a call's spans made anywhere follow the one decision for its trace", async () => {
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint, OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "0.5" }
    const sessions = Array.from({ length: 16 }, (_, i) => `ses_ratio${String(i).padStart(11, "0")}`)
    const decisions = await run(
      env,
      Effect.forEach(sessions, (session) =>
        Effect.zip(
          Effect.map(callSpan(session), (parent) => parent.sampled),
          Effect.void.pipe(withCallSpan(session, "callgate.admission"), Effect.zipRight(Effect.void.pipe(withSessionSpan(session, {}))))
        ).pipe(Effect.map(([sampled]) => ({ session, sampled })))
      )
    )
    expect(decisions.some((d) => d.sampled)).toBe(true)
    expect(decisions.some((d) => !d.sampled)).toBe(true)
    for (const { session, sampled } of decisions) {
      const names = otlp.spans.filter((s) => s.traceId === callTraceIds(session).traceId).map((s) => s.name).sort()
      expect(names).toEqual(sampled ? ["callgate.admission", "callgate.session"] : [])
    }
  })
})
