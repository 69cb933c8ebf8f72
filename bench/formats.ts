/**
 * CPU per call in each Telnyx audio format (PCMU, PCMA, L16 at 8 and 16 kHz, G.722) (docs/benchmarks.md, "Audio formats"): one callgate
 * process per format, all carrying the same simulated Telnyx TeXML calls at once, each environment
 * asking Telnyx for its format (`telnyxStreamCodec`): the simulated Telnyx streams what the `<Stream>`
 * asks for, and the bench agents receive and speak the same format (agentAudioFormat `carrier`), so
 * each process relays its format byte for byte and converts it for the VAD. CPU per call-second
 * of each process over the same windows (the side-by-side method of measureSideBySide: the host's
 * drift between one format's window and another's cannot tip the comparison), and the frames'
 * loss and delay each way.
 *
 *   npm run bench -- --only formats
 */
import { sleep } from "./benchProcess.js"
import type { DirectionFigures } from "./frameLedger.js"
import { msPerCallSecond, RelayRig, type RelayLoadOptions, rigSystemOf } from "./relayLoad.js"
import { createBenchEnvironment, type RunningGateway, startGateway } from "./systemUnderTest.js"
import type { SimStreamCodec } from "../sim/StreamCodec.js"

/**
 * The formats measured, mu-law first (the others are compared with it).
 */
export const BENCH_FORMATS: ReadonlyArray<SimStreamCodec> = ["PCMU", "PCMA", "L16;rate=8000", "L16;rate=16000", "G722"]

export interface FormatWindowFigures {
  readonly format: SimStreamCodec
  readonly open: number
  readonly msPerCallSecond: number
}

export interface FormatFigures {
  readonly format: SimStreamCodec
  /** Pooled over the windows in which this format and mu-law carried the calls (NaN: none did). */
  readonly msPerCallSecond: number
  /** Over mu-law's, in the same windows. */
  readonly ratioToMulaw: number
  readonly carrierToAgent: Pick<DirectionFigures, "lossPercent" | "unstamped"> & { readonly p99Ms: number }
  readonly agentToCarrier: Pick<DirectionFigures, "lossPercent" | "unstamped"> & { readonly p99Ms: number }
  readonly turnsAnswered: number
  readonly turnsSpoken: number
}

export interface FormatsBenchFigures {
  readonly calls: number
  readonly windowSeconds: number
  readonly windows: ReadonlyArray<ReadonlyArray<FormatWindowFigures>>
  /** Windows in which fewer than 90 % of some format's calls were up (left out of that format's figures). */
  readonly skippedWindows: number
  readonly formats: ReadonlyArray<FormatFigures>
}

const round = (value: number, digits = 3) => Math.round(value * 10 ** digits) / 10 ** digits

export const runFormatsBench = async (options: {
  /** Calls each format's callgate carries. */
  readonly calls: number
  readonly windows: number
  readonly stepSeconds: number
  readonly settleSeconds?: number
  readonly build?: string | undefined
  readonly formats?: ReadonlyArray<SimStreamCodec>
  readonly log?: (line: string) => void
}): Promise<FormatsBenchFigures> => {
  const log = options.log ?? (() => {})
  const formats = options.formats ?? BENCH_FORMATS
  const relayOptions: RelayLoadOptions = {
    systems: ["gateway"],
    steps: [options.calls],
    stepSeconds: options.stepSeconds,
    settleSeconds: options.settleSeconds ?? 3,
    build: options.build,
    log
  }
  const started: Array<{ readonly format: SimStreamCodec; readonly gateway: RunningGateway; readonly rig: RelayRig }> = []
  try {
    for (const format of formats) {
      const gateway = await startGateway({ build: options.build, inspect: true, env: { LOG_LEVEL: "warn" } })
      try {
        const agentId = "bench_agent"
        const { environmentId, apiKey } = await createBenchEnvironment(gateway, agentId, { telnyxStreamCodec: format })
        const rig = await RelayRig.around(`formats ${format}`, rigSystemOf(`callgate (${format})`, gateway), {
          carrierTarget: { mode: "gateway", gatewayUrl: gateway.baseUrl, agentId, environmentId, telnyxCodec: format },
          agentTarget: { mode: "gateway", gatewayUrl: gateway.baseUrl, agentId, environmentId, apiKey, codec: format },
          spareAgents: 2
        })
        started.push({ format, gateway, rig })
      } catch (error) {
        await gateway.stop()
        throw error
      }
    }
    // One format at a time: five callgates warming up and placing calls at once overload a small machine.
    for (const { rig } of started) await rig.warmUp(relayOptions)
    for (const { format, rig } of started) {
      const grown = await rig.load(options.calls, relayOptions)
      log(`formats: ${format}: ${grown.open} of ${options.calls} calls up${grown.failed > 0 ? `, ${grown.failed} failed: ${grown.errors.join("; ")}` : ""}`)
    }
    const windows: Array<ReadonlyArray<FormatWindowFigures>> = []
    const closedOf: Array<Array<Awaited<ReturnType<RelayRig["closeWindow"]>>>> = []
    for (let i = 0; i < options.windows; i++) {
      const opened = await Promise.all(started.map(({ rig }) => rig.openWindow()))
      await sleep(options.stepSeconds * 1000)
      const closed = await Promise.all(started.map(({ rig }, k) => rig.closeWindow(opened[k]!, relayOptions)))
      closedOf.push(closed)
      const window = closed.map((c, k) => ({ format: started[k]!.format, open: c.carrierWindow.open, msPerCallSecond: round(msPerCallSecond(c)) }))
      windows.push(window)
      log(`formats, ${options.calls} calls each, window ${i + 1}/${options.windows}: CPU ms per call-second ${window.map((w) => `${w.format} ${w.msPerCallSecond} (${w.open} open)`).join(", ")}`)
    }
    // Per call-second figures of a window whose calls had dropped say nothing (a few calls share the process's fixed costs):
    // each format is pooled over the windows in which both it and mu-law carried the calls.
    const up = (w: FormatWindowFigures) => w.open >= options.calls * 0.9
    const carriedFor = (k: number) => windows.filter((window) => up(window[0]!) && up(window[k]!))
    const pooled = (k: number, of = k) => {
      const carried = carriedFor(k)
      return carried.length === 0 ? Number.NaN : carried.reduce((sum, window) => sum + window[of]!.msPerCallSecond, 0) / carried.length
    }
    const direction = (d: DirectionFigures) => ({ lossPercent: d.lossPercent, unstamped: d.unstamped, p99Ms: d.delayMs.p99 })
    const figures: Array<FormatFigures> = started.map(({ format }, k) => {
      const last = closedOf[closedOf.length - 1]![k]!
      return {
        format,
        msPerCallSecond: round(pooled(k)),
        ratioToMulaw: round(pooled(k) / pooled(k, 0)),
        carrierToAgent: direction(last.carrierToAgent),
        agentToCarrier: direction(last.agentToCarrier),
        turnsSpoken: closedOf.reduce((sum, closed) => sum + closed[k]!.carrierWindow.turns, 0),
        turnsAnswered: closedOf.reduce((sum, closed) => sum + closed[k]!.carrierWindow.answers, 0)
      }
    })
    for (const f of figures) {
      log(
        `formats: ${f.format} ${f.msPerCallSecond} ms CPU per call-second (${f.ratioToMulaw}x mu-law); p99 carrier->agent ${f.carrierToAgent.p99Ms} ms, ` +
          `agent->carrier ${f.agentToCarrier.p99Ms} ms; ${f.turnsAnswered} of ${f.turnsSpoken} turns answered`
      )
    }
    const skippedWindows = windows.filter((window) => !window.every(up)).length
    return { calls: options.calls, windowSeconds: options.stepSeconds, windows, skippedWindows, formats: figures }
  } finally {
    await Promise.all(started.map(({ rig }) => rig.unload().catch(() => undefined)))
    await Promise.all(started.map(({ rig }) => rig.stop().catch(() => undefined)))
  }
}
