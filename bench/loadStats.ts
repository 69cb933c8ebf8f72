/**
 * What a simulator process reports about itself for a measurement window, so a reader can tell
 * when the load generator, not the system under test, was the limit: its CPU use and how late
 * its timers ran (event-loop delay).
 */
import { monitorEventLoopDelay } from "node:perf_hooks"

export interface LoadGeneratorFigures {
  /** CPU used by this process during the window, percent of one core. */
  readonly cpuPercent: number
  /** How late the event loop ran a timer during the window, ms (0: on time). */
  readonly loopDelayMs: { readonly p50: number; readonly p99: number; readonly max: number }
}

const RESOLUTION_MS = 5

export class LoadWindow {
  private readonly loop = monitorEventLoopDelay({ resolution: RESOLUTION_MS })
  private cpu = process.cpuUsage()
  private startedAt = performance.now()

  open(): void {
    this.loop.reset()
    this.loop.enable()
    this.cpu = process.cpuUsage()
    this.startedAt = performance.now()
  }

  close(): LoadGeneratorFigures {
    this.loop.disable()
    const used = process.cpuUsage(this.cpu)
    const elapsedMs = performance.now() - this.startedAt
    // The histogram holds the whole interval between samples: lateness is what exceeds the resolution.
    const ms = (ns: number) => Math.max(0, Math.round((ns / 1e6 - RESOLUTION_MS) * 100) / 100)
    return {
      cpuPercent: Math.round(((used.user + used.system) / 1000 / elapsedMs) * 1000) / 10,
      loopDelayMs: { p50: ms(this.loop.percentile(50)), p99: ms(this.loop.percentile(99)), max: ms(this.loop.max) }
    }
  }
}
