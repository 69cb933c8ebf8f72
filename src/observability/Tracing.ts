import { createHash, randomFillSync } from "node:crypto"
import { Clock, Config, ConfigError, Context, Effect, Either, type Exit, Layer, Option, Tracer } from "effect"

/**
 * Traces (docs/observability.md). With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) set,
 * spans go to an OpenTelemetry SDK tracer provider (through `@effect/opentelemetry`) and out over
 * OTLP/HTTP, protobuf or JSON as `OTEL_EXPORTER_OTLP_PROTOCOL` says, sampled as `OTEL_TRACES_SAMPLER`
 * says. Unset (or `OTEL_SDK_DISABLED=true`): no SDK, no exporter; spans are bare id holders, so
 * log lines and `traceparent` still name the call's trace (flagged not sampled).
 *
 * A call's trace is derived from its session id: the trace id and the session span's id are a hash
 * of it. So every part of the call, wherever it runs (the entry on one instance, the stream on
 * another, a rescue through the `<Redirect>`, a webhook retried hours later by any instance), can
 * name the session span as its parent without carrying a context around; the session span itself is
 * created with those ids (`CallTracer` below hands them to the SDK's id generator for that one span).
 */

/** The session span's ids for a session (SHA-256 of the session id: 16 bytes of trace id, 8 of span id). */
export const callTraceIds = (sessionId: string): { readonly traceId: string; readonly spanId: string } => {
  const digest = createHash("sha256").update(`callgate-call-trace/${sessionId}`).digest("hex")
  return { traceId: digest.slice(0, 32), spanId: digest.slice(32, 48) }
}

/** Given to a span's context: the SDK gives that span these ids (the session span of a call). */
class FixedSpanIds extends Context.Tag("callgate/FixedSpanIds")<FixedSpanIds, { readonly traceId: string; readonly spanId: string }>() {}

/** W3C `traceparent` of a span: version 00, its trace and span id, sampled flag. */
export const traceparentOf = (span: Tracer.AnySpan): string => `00-${span.traceId}-${span.spanId}-${span.sampled ? "01" : "00"}`

/** The `traceparent` header of the current span, if any (for outgoing requests). */
export const traceparentHeader: Effect.Effect<Record<string, string>> = Effect.map(Effect.currentSpan, (span) => ({
  traceparent: traceparentOf(span)
})).pipe(Effect.orElseSucceed(() => ({})))

/** Random bytes for span and trace ids, drawn from a pool filled 4 KB at a time (one system call per 512 span ids, not one each). */
const idPool = Buffer.alloc(4096)
let idPoolAt = idPool.length
const randomHex = (bytes: number): string => {
  if (idPoolAt + bytes > idPool.length) {
    randomFillSync(idPool)
    idPoolAt = 0
  }
  idPoolAt += bytes
  return idPool.toString("hex", idPoolAt - bytes, idPoolAt)
}

/** What an id-only span answers for its attributes: nothing is kept, so one empty map serves them all. */
const NO_ATTRIBUTES: ReadonlyMap<string, unknown> = new Map()

/**
 * A span that only holds ids (tracing off): what the logs and `traceparent` need, no attributes
 * kept, nothing recorded.
 */
class IdSpan implements Tracer.Span {
  readonly _tag = "Span"
  readonly spanId: string
  readonly traceId: string
  readonly sampled = false
  readonly attributes: ReadonlyMap<string, unknown> = NO_ATTRIBUTES
  status: Tracer.SpanStatus
  constructor(
    readonly name: string,
    readonly parent: Option.Option<Tracer.AnySpan>,
    readonly context: Context.Context<never>,
    readonly links: Array<Tracer.SpanLink>,
    startTime: bigint,
    readonly kind: Tracer.SpanKind
  ) {
    const fixed = Context.getOption(context, FixedSpanIds)
    this.traceId = Option.isSome(fixed) ? fixed.value.traceId : parent._tag === "Some" ? parent.value.traceId : randomHex(16)
    this.spanId = Option.isSome(fixed) ? fixed.value.spanId : randomHex(8)
    this.status = { _tag: "Started", startTime }
  }
  end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
    this.status = { _tag: "Ended", startTime: this.status.startTime, endTime, exit }
  }
  attribute(): void {}
  event(): void {}
  addLinks(): void {}
}

/** The tracer every span of callgate goes through (see the module comment). */
export interface CallTracer extends Tracer.Tracer {
  /** Whether a call's trace is sampled (the sampler's decision for the session span). */
  readonly sampledCall: (traceId: string) => boolean
  readonly exporting: boolean
}

/** What the exporting tracer needs from the SDK (observability/TracingExport.ts). */
export interface SdkTracing {
  readonly tracer: Tracer.Tracer
  /** The ids the SDK gives the next span it starts (undefined: random). */
  readonly fixIds: (ids: { readonly traceId: string; readonly spanId: string } | undefined) => void
  readonly sampledCall: (traceId: string) => boolean
}

export const makeCallTracer = (sdk: SdkTracing | undefined): CallTracer => {
  const tracer = Tracer.make({
    span(name, parent, context, links, startTime, kind, options) {
      if (sdk === undefined) return new IdSpan(name, parent, context, links.slice(), startTime, kind)
      const fixed = Context.getOption(context, FixedSpanIds)
      if (Option.isNone(fixed)) return sdk.tracer.span(name, parent, context, links, startTime, kind, options)
      sdk.fixIds(fixed.value)
      try {
        return sdk.tracer.span(name, Option.none(), context, links, startTime, kind, { ...options, root: true })
      } finally {
        sdk.fixIds(undefined)
      }
    },
    context: (execution, fiber) => (sdk === undefined ? execution() : sdk.tracer.context(execution, fiber))
  })
  return Object.assign(tracer, { exporting: sdk !== undefined, sampledCall: sdk?.sampledCall ?? (() => false) })
}

const isCallTracer = (tracer: Tracer.Tracer): tracer is CallTracer => "sampledCall" in tracer

/** Whether spans made on `tracer` leave the process: callgate's tracer with tracing off makes id-only spans; any other tracer is assumed to keep what it is given. */
export const spansLeave = (tracer: Tracer.Tracer): boolean => !isCallTracer(tracer) || tracer.exporting

/**
 * The session span of a call as a parent for spans made elsewhere (the entry, a rescue after the
 * stream, a webhook delivery): its ids, and whether the call's trace is sampled.
 */
export const callSpan = (sessionId: string): Effect.Effect<Tracer.ExternalSpan> =>
  Effect.map(Effect.tracer, (tracer) => {
    const { traceId, spanId } = callTraceIds(sessionId)
    return Tracer.externalSpan({ traceId, spanId, sampled: isCallTracer(tracer) && tracer.sampledCall(traceId) })
  })

/** The options of a call's session span: a root span with the ids `callTraceIds` gives. */
const sessionSpanOptions = (sessionId: string, attributes: Record<string, unknown>) => ({
  root: true,
  // The span is made for every call: no stack is captured for it (an Error and its frames per call).
  captureStackTrace: false,
  kind: "server" as const,
  attributes,
  context: Context.make(FixedSpanIds, callTraceIds(sessionId))
})

/** Runs `effect` as the call's session span (starts now, ends when `effect` does). */
export const withSessionSpan =
  (sessionId: string, attributes: Record<string, unknown>) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.withSpan(effect, "callgate.session", sessionSpanOptions(sessionId, attributes))

/**
 * The call's session span, started now, for a caller that sets it as the parent span itself and
 * ends it (`endSpan`): the call's own fiber (LiveCall.run), which sets its refs once.
 */
export const makeSessionSpan = (sessionId: string, attributes: Record<string, unknown>): Effect.Effect<Tracer.Span> =>
  Effect.makeSpan("callgate.session", sessionSpanOptions(sessionId, attributes))

/** Ends `span` now with `exit` (what `Effect.withSpan` does when its effect ends). */
export const endSpan = (span: Tracer.Span, exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> =>
  Effect.flatMap(Clock.currentTimeNanos, (now) => Effect.sync(() => span.end(now, exit)))

/** Runs `effect` in a child span of the call's session span, wherever the session runs. */
export const withCallSpan =
  (sessionId: string, name: string, options: { readonly attributes?: Record<string, unknown>; readonly kind?: Tracer.SpanKind } = {}) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(callSpan(sessionId), (parent) => Effect.withSpan(effect, name, { ...options, parent }))

// Configuration: the standard OTEL_* variables (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/).

export type OtlpProtocol = "http/protobuf" | "http/json"

export interface TracingSettings {
  /** The traces URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`); none: not exporting. */
  readonly url: Option.Option<string>
  readonly protocol: OtlpProtocol
  readonly headers: Record<string, string>
  readonly timeoutMillis: number
  readonly compression: "gzip" | "none"
  readonly sampler: SamplerSetting
  readonly serviceName: string
  readonly batch: {
    readonly scheduledDelayMillis: number
    readonly maxQueueSize: number
    readonly maxExportBatchSize: number
    readonly exportTimeoutMillis: number
  }
}

const invalid = (name: string, message: string) => ConfigError.InvalidData([name], message)

const optionalString = (name: string) =>
  Config.string(name).pipe(
    Config.option,
    Config.map(Option.filter((value) => value.trim().length > 0))
  )

const eitherOf = <A>(name: string, read: (value: string) => Either.Either<A, string>, fallback: A) =>
  optionalString(name).pipe(
    Config.mapOrFail((value) =>
      Option.match(value, {
        onNone: () => Either.right(fallback),
        onSome: (text) => Either.mapLeft(read(text.trim()), (message) => invalid(name, message))
      })
    )
  )

/** The first of two variables that is set (the signal-specific one first). */
const either2 = <A>(specific: string, general: string, read: (value: string) => Either.Either<A, string>, fallback: A) =>
  Config.all([optionalString(specific), optionalString(general)]).pipe(
    Config.mapOrFail(([a, b]) => {
      const [name, value] = Option.isSome(a) ? [specific, a] : [general, b]
      return Option.match(value, {
        onNone: () => Either.right(fallback),
        onSome: (text) => Either.mapLeft(read(text.trim()), (message) => invalid(name, message))
      })
    })
  )

const positiveInt = (value: string) => {
  const n = Number(value)
  return Number.isInteger(n) && n > 0 ? Either.right(n) : Either.left(`expected a positive whole number, got "${value}"`)
}

const parseProtocol = (value: string): Either.Either<OtlpProtocol, string> =>
  value === "http/protobuf" || value === "http/json"
    ? Either.right(value)
    : Either.left(
        value === "grpc"
          ? "grpc is not supported by callgate: use http/protobuf or http/json (OTLP/HTTP)"
          : `expected http/protobuf or http/json, got "${value}"`
      )

/** `key1=value1,key2=value2`, values URL-encoded (W3C Baggage format, as the spec says). */
const parseHeaders = (value: string): Either.Either<Record<string, string>, string> => {
  const headers: Record<string, string> = {}
  for (const part of value.split(",")) {
    if (part.trim().length === 0) continue
    const at = part.indexOf("=")
    if (at <= 0) return Either.left("expected key=value pairs separated by commas")
    try {
      headers[decodeURIComponent(part.slice(0, at).trim())] = decodeURIComponent(part.slice(at + 1).trim())
    } catch {
      return Either.left("a header name or value is not valid URL encoding")
    }
  }
  return Either.right(headers)
}

const parseUrl = (value: string): Either.Either<string, string> => {
  try {
    const url = new URL(value)
    return url.protocol === "http:" || url.protocol === "https:" ? Either.right(value) : Either.left("expected an http:// or https:// URL")
  } catch {
    return Either.left(`expected a URL, got "${value}"`)
  }
}

const ratioOf = (arg: Option.Option<string>): Either.Either<number, string> => {
  if (Option.isNone(arg)) return Either.right(1)
  const ratio = Number(arg.value)
  return Number.isFinite(ratio) && ratio >= 0 && ratio <= 1 ? Either.right(ratio) : Either.left(`expected a ratio from 0 to 1, got "${arg.value}"`)
}

/** OTEL_TRACES_SAMPLER and its argument (the ratio, for the ratio samplers). */
export interface SamplerSetting {
  readonly name: "always_on" | "always_off" | "traceidratio" | "parentbased_always_on" | "parentbased_always_off" | "parentbased_traceidratio"
  readonly ratio: number
}

const samplerConfig = Config.all([optionalString("OTEL_TRACES_SAMPLER"), optionalString("OTEL_TRACES_SAMPLER_ARG")]).pipe(
  Config.mapOrFail(([name, arg]): Either.Either<SamplerSetting, ConfigError.ConfigError> => {
    const withRatio = (name: SamplerSetting["name"]) =>
      Either.mapBoth(ratioOf(arg), { onLeft: (message) => invalid("OTEL_TRACES_SAMPLER_ARG", message), onRight: (ratio) => ({ name, ratio }) })
    const chosen = Option.getOrElse(name, () => "parentbased_always_on").trim()
    switch (chosen) {
      case "always_on":
      case "always_off":
      case "parentbased_always_on":
      case "parentbased_always_off":
        return Either.right({ name: chosen, ratio: 1 })
      case "traceidratio":
      case "parentbased_traceidratio":
        return withRatio(chosen)
      default:
        return Either.left(
          invalid(
            "OTEL_TRACES_SAMPLER",
            "expected always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"
          )
        )
    }
  })
)

const serviceNameConfig = Config.all([optionalString("OTEL_SERVICE_NAME"), optionalString("OTEL_RESOURCE_ATTRIBUTES")]).pipe(
  Config.map(([name, attributes]) =>
    Option.getOrElse(name, () =>
      Option.getOrElse(
        Option.flatMap(attributes, (text) =>
          Option.fromNullable(
            text
              .split(",")
              .map((pair) => pair.split("="))
              .find(([key]) => key?.trim() === "service.name")?.[1]
              ?.trim()
          )
        ),
        () => "callgate"
      )
    )
  )
)

export const TracingConfig: Config.Config<TracingSettings> = Config.all({
  disabled: Config.boolean("OTEL_SDK_DISABLED").pipe(Config.withDefault(false)),
  tracesEndpoint: eitherOf("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", (v) => Either.map(parseUrl(v), Option.some), Option.none<string>()),
  endpoint: eitherOf(
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    (v) => Either.map(parseUrl(v), (url) => Option.some(`${url.replace(/\/+$/, "")}/v1/traces`)),
    Option.none<string>()
  ),
  protocol: either2("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL", parseProtocol, "http/protobuf" as OtlpProtocol),
  headers: Config.all([
    eitherOf("OTEL_EXPORTER_OTLP_HEADERS", parseHeaders, {}),
    eitherOf("OTEL_EXPORTER_OTLP_TRACES_HEADERS", parseHeaders, {})
  ]).pipe(Config.map(([general, specific]) => ({ ...general, ...specific }))),
  timeoutMillis: either2("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT", positiveInt, 10_000),
  compression: either2(
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    (v): Either.Either<"gzip" | "none", string> => (v === "gzip" || v === "none" ? Either.right(v) : Either.left(`expected gzip or none, got "${v}"`)),
    "none" as "gzip" | "none"
  ),
  sampler: samplerConfig,
  serviceName: serviceNameConfig,
  scheduledDelayMillis: eitherOf("OTEL_BSP_SCHEDULE_DELAY", positiveInt, 5000),
  maxQueueSize: eitherOf("OTEL_BSP_MAX_QUEUE_SIZE", positiveInt, 2048),
  maxExportBatchSize: eitherOf("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", positiveInt, 512),
  exportTimeoutMillis: eitherOf("OTEL_BSP_EXPORT_TIMEOUT", positiveInt, 30_000)
}).pipe(
  Config.map(
    (c): TracingSettings => ({
      url: c.disabled ? Option.none() : Option.orElse(c.tracesEndpoint, () => c.endpoint),
      protocol: c.protocol,
      headers: c.headers,
      timeoutMillis: c.timeoutMillis,
      compression: c.compression,
      sampler: c.sampler,
      serviceName: c.serviceName,
      batch: {
        scheduledDelayMillis: c.scheduledDelayMillis,
        maxQueueSize: c.maxQueueSize,
        maxExportBatchSize: Math.min(c.maxExportBatchSize, c.maxQueueSize),
        exportTimeoutMillis: c.exportTimeoutMillis
      }
    })
  )
)

/** Spans are id holders only: no SDK, no exporter (OTLP endpoint unset, or OTEL_SDK_DISABLED). */
export const tracingOffLayer: Layer.Layer<never> = Layer.setTracer(makeCallTracer(undefined))

/**
 * Tracing as the OTEL_* variables say (see the module comment). The SDK and the exporters are
 * loaded only when exporting: an instance without an endpoint never loads them.
 */
export const tracingLayer: Layer.Layer<never, ConfigError.ConfigError> = Layer.unwrapEffect(
  Effect.flatMap(TracingConfig, (settings) =>
    Option.match(settings.url, {
      onNone: () => Effect.succeed(tracingOffLayer),
      onSome: (url) => Effect.promise(() => import("./TracingExport.js")).pipe(Effect.map((sdk) => sdk.exportingLayer(settings, url)))
    })
  )
)
