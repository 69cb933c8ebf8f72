/**
 * Tracing's cost (docs/observability.md, "Traces"; docs/benchmarks.md): two callgate processes
 * carrying the same calls at once, one exporting every span (OTLP/HTTP protobuf, sampling 100 %,
 * to a sink in this process that reads and discards each export) and one without an endpoint
 * (tracing off: no SDK loaded). CPU per call-second of each, with the same side-by-side method as
 * measureSideBySide, so the host's drift between windows cannot tip the ratio.
 */
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { RelayRig, type RelayLoadOptions, rigSystemOf } from "./relayLoad.js"
import { sleep } from "./benchProcess.js"
import { createBenchEnvironment, startGateway } from "./systemUnderTest.js"

export interface TracingWindow {
  readonly offMsPerCallSecond: number
  readonly onMsPerCallSecond: number
  /** Tracing on over tracing off. */
  readonly ratio: number
  readonly onOpen: number
  readonly offOpen: number
}

export interface TracingBenchFigures {
  readonly calls: number
  readonly windowSeconds: number
  readonly windows: ReadonlyArray<TracingWindow>
  /** Pooled over the windows. */
  readonly ratio: number
  /** OTLP export requests and bytes the sink received from the "on" process (a check that it exported). */
  readonly exports: number
  readonly exportedBytes: number
}

const round = (value: number, digits = 3) => Math.round(value * 10 ** digits) / 10 ** digits

/** An OTLP/HTTP sink on loopback: answers every export 200 with an empty response, counts what came. */
const startSink = async () => {
  let exports = 0
  let bytes = 0
  const server = createServer((request, response) => {
    request.on("data", (chunk: Buffer) => (bytes += chunk.length))
    request.on("end", () => {
      exports++
      response.writeHead(200, { "content-type": "application/x-protobuf" })
      response.end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    counts: () => ({ exports, bytes }),
    close: () => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve())))
  }
}

export const runTracingBench = async (options: {
  readonly calls: number
  readonly windows: number
  readonly stepSeconds: number
  readonly settleSeconds?: number
  readonly build?: string | undefined
  readonly log?: (line: string) => void
}): Promise<TracingBenchFigures> => {
  const log = options.log ?? (() => {})
  const sink = await startSink()
  const relayOptions: RelayLoadOptions = {
    systems: ["gateway"],
    steps: [options.calls],
    stepSeconds: options.stepSeconds,
    settleSeconds: options.settleSeconds ?? 3,
    build: options.build,
    log
  }
  const start = async (tracing: "on" | "off") => {
    const env: Record<string, string> = { LOG_LEVEL: "warn" }
    if (tracing === "on") Object.assign(env, { OTEL_EXPORTER_OTLP_ENDPOINT: sink.endpoint, OTEL_TRACES_SAMPLER: "always_on", OTEL_BSP_SCHEDULE_DELAY: "1000" })
    const gateway = await startGateway({ build: options.build, inspect: true, env })
    try {
      const agentId = "bench_agent"
      const { environmentId, apiKey } = await createBenchEnvironment(gateway, agentId)
      const rig = await RelayRig.around(`tracing ${tracing}`, rigSystemOf(`callgate (tracing ${tracing})`, gateway), {
        carrierTarget: { mode: "gateway", gatewayUrl: gateway.baseUrl, agentId, environmentId },
        agentTarget: { mode: "gateway", gatewayUrl: gateway.baseUrl, agentId, environmentId, apiKey },
        spareAgents: 2
      })
      return { gateway, rig }
    } catch (error) {
      await gateway.stop()
      throw error
    }
  }
  const off = await start("off")
  const on = await start("on").catch(async (error) => {
    await off.rig.stop()
    throw error
  })
  const rigs = [off.rig, on.rig] as const
  try {
    await Promise.all(rigs.map((rig) => rig.warmUp(relayOptions)))
    await Promise.all(rigs.map((rig) => rig.load(options.calls, relayOptions)))
    const windows: Array<TracingWindow> = []
    for (let i = 0; i < options.windows; i++) {
      const opened = await Promise.all(rigs.map((rig) => rig.openWindow()))
      await sleep(options.stepSeconds * 1000)
      const [o, t] = await Promise.all(rigs.map((rig, k) => rig.closeWindow(opened[k]!, relayOptions)))
      const perCallSecond = (value: number, open: number, seconds: number) => value / (Math.max(1, open) * seconds)
      const offMs = perCallSecond(o!.cpuSeconds * 1000, o!.carrierWindow.open, o!.windowSeconds)
      const onMs = perCallSecond(t!.cpuSeconds * 1000, t!.carrierWindow.open, t!.windowSeconds)
      const window: TracingWindow = {
        offMsPerCallSecond: round(offMs),
        onMsPerCallSecond: round(onMs),
        ratio: round(onMs / offMs),
        onOpen: t!.carrierWindow.open,
        offOpen: o!.carrierWindow.open
      }
      windows.push(window)
      log(
        `tracing ${options.calls} calls, window ${i + 1}/${options.windows}: CPU ms per call-second off ${window.offMsPerCallSecond}, ` +
          `on ${window.onMsPerCallSecond} (${window.ratio}x)`
      )
    }
    const sum = (pick: (w: TracingWindow) => number) => windows.reduce((total, w) => total + pick(w), 0)
    // The "on" process exported (its calls' spans leave as they end: unload first).
    await Promise.all(rigs.map((rig) => rig.unload().catch(() => undefined)))
    await sleep(2000)
    return {
      calls: options.calls,
      windowSeconds: options.stepSeconds,
      windows,
      ratio: round(sum((w) => w.onMsPerCallSecond) / sum((w) => w.offMsPerCallSecond)),
      exports: sink.counts().exports,
      exportedBytes: sink.counts().bytes
    }
  } finally {
    await Promise.all(rigs.map((rig) => rig.unload().catch(() => undefined)))
    await Promise.all(rigs.map((rig) => rig.stop().catch(() => undefined)))
    await sink.close()
  }
}
