import { NodeSdk, Resource, Tracer as OtelTracer } from "@effect/opentelemetry"
import { ROOT_CONTEXT, SpanKind } from "@opentelemetry/api"
import { OTLPTraceExporter as OTLPJsonTraceExporter } from "@opentelemetry/exporter-trace-otlp-http"
import { OTLPTraceExporter as OTLPProtoTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto"
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  type IdGenerator,
  ParentBasedSampler,
  RandomIdGenerator,
  type Sampler,
  SamplingDecision,
  TraceIdRatioBasedSampler
} from "@opentelemetry/sdk-trace-base"
import { Effect, Layer } from "effect"
import { makeCallTracer, type SamplerSetting, type TracingSettings } from "./Tracing.js"

/**
 * The exporting half of observability/Tracing.ts, loaded (dynamic import) only when an OTLP
 * endpoint is set: the OpenTelemetry SDK's tracer provider behind `@effect/opentelemetry`'s tracer,
 * a batch span processor and the OTLP/HTTP exporter of the configured protocol.
 */

/** The SDK's id generator, told for one span at a time which ids to use (a call's session span). */
class CallIdGenerator implements IdGenerator {
  private readonly random = new RandomIdGenerator()
  fixed: { readonly traceId: string; readonly spanId: string } | undefined
  generateTraceId(): string {
    return this.fixed?.traceId ?? this.random.generateTraceId()
  }
  generateSpanId(): string {
    return this.fixed?.spanId ?? this.random.generateSpanId()
  }
}

const samplerOf = ({ name, ratio }: SamplerSetting): Sampler => {
  switch (name) {
    case "always_on":
      return new AlwaysOnSampler()
    case "always_off":
      return new AlwaysOffSampler()
    case "traceidratio":
      return new TraceIdRatioBasedSampler(ratio)
    case "parentbased_always_on":
      return new ParentBasedSampler({ root: new AlwaysOnSampler() })
    case "parentbased_always_off":
      return new ParentBasedSampler({ root: new AlwaysOffSampler() })
    case "parentbased_traceidratio":
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) })
  }
}

/** The SDK's tracer provider, exporting over OTLP/HTTP to `url`; flushed (up to 3 s) when the layer closes. */
export const exportingLayer = (settings: TracingSettings, url: string): Layer.Layer<never> => {
  const exporterOptions = { url, headers: settings.headers, timeoutMillis: settings.timeoutMillis, compression: settings.compression as never }
  const ids = new CallIdGenerator()
  const sampler = samplerOf(settings.sampler)
  const sampledCall = (traceId: string) =>
    sampler.shouldSample(ROOT_CONTEXT, traceId, "callgate.session", SpanKind.SERVER, {}, []).decision === SamplingDecision.RECORD_AND_SAMPLED
  return Layer.unwrapEffect(
    Effect.map(OtelTracer.make, (tracer) => Layer.setTracer(makeCallTracer({ tracer, fixIds: (fixed) => (ids.fixed = fixed), sampledCall })))
  ).pipe(
    Layer.provide(OtelTracer.layerTracer),
    Layer.provide(
      Layer.suspend(() =>
        NodeSdk.layerTracerProvider(
          new BatchSpanProcessor(
            settings.protocol === "http/json" ? new OTLPJsonTraceExporter(exporterOptions) : new OTLPProtoTraceExporter(exporterOptions),
            settings.batch
          ),
          { idGenerator: ids, sampler, shutdownTimeout: "3 seconds" }
        )
      )
    ),
    Layer.provide(Resource.layerFromEnv({ "service.name": settings.serviceName }))
  )
}
