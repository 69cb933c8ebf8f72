/**
 * The relay ramp as a chart (docs/benchmarks.md, "The chart"): calls on the x axis; above, the
 * p99 delay (the worse of the two directions) of callgate and the bare relay with the 5 ms pass
 * line; below, the CPU each spends per call-second. A plain SVG string, no dependencies, so the
 * README can show the run it came from.
 */
import type { StepFigures, SystemFigures } from "./relayLoad.js"

export interface ChartSeries {
  readonly name: string
  readonly color: string
  readonly steps: ReadonlyArray<StepFigures>
}

const WIDTH = 760
const PANEL_HEIGHT = 210
const LEFT = 70
const RIGHT = 150
const TOP = 40
const GAP = 60
const BOTTOM = 50
/** Delays above this are drawn at the top edge (failing steps run to hundreds of ms). */
const DELAY_CAP_MS = 30

const escape = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

const niceStep = (max: number, ticks: number) => {
  const raw = max / ticks
  const magnitude = 10 ** Math.floor(Math.log10(raw))
  const norm = raw / magnitude
  return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 2.5 ? 2.5 : norm <= 5 ? 5 : 10) * magnitude
}

const format = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(n < 1 ? 2 : 1))

const p99 = (step: StepFigures) => Math.max(step.carrierToAgent.delayMs.p99, step.agentToCarrier.delayMs.p99)

/** `systems`: callgate and the bare relay as the relay ramp measured them. */
export const renderRelayChart = (systems: ReadonlyArray<ChartSeries>, title: string): string => {
  const all = systems.flatMap((s) => s.steps)
  const height = TOP + 2 * PANEL_HEIGHT + GAP + BOTTOM
  const plotWidth = WIDTH - LEFT - RIGHT
  const calls = [...new Set(all.map((s) => s.calls))].sort((a, b) => a - b)
  const maxCalls = Math.max(1, ...calls)
  const x = (n: number) => LEFT + (n / maxCalls) * plotWidth
  const out: Array<string> = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${LEFT}" y="22" font-size="14" font-weight="bold">${escape(title)}</text>`
  ]

  const panel = (top: number, label: string, value: (step: StepFigures) => number | undefined, cap: number | undefined, passLine?: number) => {
    const values = all.map(value).filter((v): v is number => v !== undefined && Number.isFinite(v))
    const rawMax = Math.max(0, ...values)
    const maxValue = Math.max(cap === undefined ? rawMax : Math.min(cap, rawMax), passLine ?? 0, 0.001)
    const step = niceStep(maxValue, 5)
    const top_ = Math.ceil(maxValue / step) * step
    const y = (v: number) => top + PANEL_HEIGHT - (Math.min(v, top_) / top_) * PANEL_HEIGHT
    out.push(`<rect x="${LEFT}" y="${top}" width="${plotWidth}" height="${PANEL_HEIGHT}" fill="none" stroke="#999"/>`)
    for (let v = 0; v <= top_ + 1e-9; v += step) {
      out.push(`<line x1="${LEFT}" x2="${LEFT + plotWidth}" y1="${y(v)}" y2="${y(v)}" stroke="#eee"/>`)
      out.push(`<text x="${LEFT - 6}" y="${y(v) + 4}" text-anchor="end">${format(v)}</text>`)
    }
    out.push(
      `<text transform="translate(16 ${top + PANEL_HEIGHT / 2}) rotate(-90)" text-anchor="middle">${escape(label)}</text>`
    )
    if (passLine !== undefined) {
      out.push(`<line x1="${LEFT}" x2="${LEFT + plotWidth}" y1="${y(passLine)}" y2="${y(passLine)}" stroke="#c33" stroke-dasharray="5 4"/>`)
      out.push(`<text x="${LEFT + plotWidth + 6}" y="${y(passLine) + 4}" fill="#c33">${passLine} ms pass line</text>`)
    }
    for (const series of systems) {
      const points = series.steps
        .map((s) => ({ s, v: value(s) }))
        .filter((p): p is { s: StepFigures; v: number } => p.v !== undefined && Number.isFinite(p.v))
      if (points.length === 0) continue
      out.push(
        `<polyline fill="none" stroke="${series.color}" stroke-width="2" points="${points.map((p) => `${x(p.s.calls).toFixed(1)},${y(p.v).toFixed(1)}`).join(" ")}"/>`
      )
      for (const p of points) {
        // Filled: the step passed (< 0.1 % lost, p99 < 5 ms); hollow: it did not.
        out.push(
          `<circle cx="${x(p.s.calls).toFixed(1)}" cy="${y(p.v).toFixed(1)}" r="4" stroke="${series.color}" stroke-width="2" fill="${p.s.pass ? series.color : "white"}"><title>${escape(`${series.name}, ${p.s.calls} calls: ${format(Math.round(p.v * 100) / 100)}`)}</title></circle>`
        )
      }
    }
  }

  panel(TOP, `p99 delay, ms (capped at ${DELAY_CAP_MS})`, p99, DELAY_CAP_MS, 5)
  const cpuTop = TOP + PANEL_HEIGHT + GAP
  panel(cpuTop, "CPU ms per call-second", (s) => s.system.cpuMsPerCallSecond, undefined)

  const axisY = cpuTop + PANEL_HEIGHT
  for (const n of calls) {
    out.push(`<line x1="${x(n)}" x2="${x(n)}" y1="${axisY}" y2="${axisY + 5}" stroke="#999"/>`)
    out.push(`<text x="${x(n)}" y="${axisY + 18}" text-anchor="middle">${n}</text>`)
    out.push(`<line x1="${x(n)}" x2="${x(n)}" y1="${TOP + PANEL_HEIGHT}" y2="${TOP + PANEL_HEIGHT + 5}" stroke="#999"/>`)
  }
  out.push(`<text x="${LEFT + plotWidth / 2}" y="${axisY + 38}" text-anchor="middle">concurrent calls</text>`)

  systems.forEach((series, i) => {
    const ly = TOP + 20 + i * 20
    out.push(`<line x1="${WIDTH - RIGHT + 12}" x2="${WIDTH - RIGHT + 36}" y1="${ly}" y2="${ly}" stroke="${series.color}" stroke-width="2"/>`)
    out.push(`<text x="${WIDTH - RIGHT + 42}" y="${ly + 4}">${escape(series.name)}</text>`)
  })
  out.push(`<text x="${WIDTH - RIGHT + 12}" y="${TOP + 20 + systems.length * 20 + 6}" fill="#555">hollow: step failed</text>`)
  out.push("</svg>")
  return `${out.join("\n")}\n`
}

/** The chart of one run's relay part, or undefined when neither system has steps. */
export const relayChartOf = (
  baseline: SystemFigures | undefined,
  gateway: SystemFigures | undefined,
  title: string
): string | undefined => {
  const series: Array<ChartSeries> = []
  if (gateway !== undefined && gateway.steps.length > 0) series.push({ name: "callgate", color: "#1f6fd1", steps: gateway.steps })
  if (baseline !== undefined && baseline.steps.length > 0) series.push({ name: "bare relay", color: "#777", steps: baseline.steps })
  return series.length === 0 ? undefined : renderRelayChart(series, title)
}
