import { readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { repoRoot } from "../support/gatewayProcess.js"
import { makeTestApp, type TestApp } from "../support/testApp.js"

const dashboard = JSON.parse(readFileSync(join(repoRoot, "deploy/grafana/callgate.json"), "utf8")) as {
  panels: Array<{ title: string; type: string; targets: Array<{ expr: string }> }>
}
const metricsDoc = readFileSync(join(repoRoot, "docs/observability.md"), "utf8")

describe("metrics reference and Grafana dashboard", () => {
  let t: TestApp
  let exported: Map<string, string>
  beforeAll(async () => {
    // The whole production graph, so every service has registered its instruments.
    t = await makeTestApp("memory")
    const text = (await t.app.inject({ method: "GET", url: "/metrics" })).body
    exported = new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((match) => [match[1]!, match[2]!]))
  })
  afterAll(() => t.close())

  /** A series name as a query may use it: histograms also as _bucket, _sum and _count. */
  const isExported = (name: string) => {
    if (exported.has(name)) return true
    const base = name.replace(/_(bucket|sum|count)$/, "")
    return base !== name && exported.get(base) === "histogram"
  }

  it("every query of every panel names at least one metric, and only metrics /metrics exports", () => {
    expect(dashboard.panels.length).toBeGreaterThanOrEqual(8)
    for (const panel of dashboard.panels) {
      expect(panel.targets.length, panel.title).toBeGreaterThan(0)
      for (const { expr } of panel.targets) {
        const names = [...expr.matchAll(/\b(callgate_[a-z0-9_]+)/g)].map((match) => match[1]!)
        expect(names.length, `${panel.title}: ${expr}`).toBeGreaterThan(0)
        for (const name of names) expect(isExported(name), `${panel.title}: ${name} is not exported`).toBe(true)
      }
    }
  })

  it("covers calls, the turn latency heat map and p50/p95, rescues by trigger, breaker occurrences, deliveries and event-loop delay", () => {
    const all = dashboard.panels.flatMap((panel) => panel.targets.map((target) => ({ type: panel.type, expr: target.expr })))
    const has = (pattern: RegExp, type?: string) => all.some((q) => pattern.test(q.expr) && (type === undefined || q.type === type))
    expect(has(/callgate_sessions_(active|ended_total)/)).toBe(true)
    expect(has(/callgate_agent_response_latency_seconds_bucket/, "heatmap")).toBe(true)
    expect(has(/histogram_quantile\(0\.5,.*callgate_agent_response_latency_seconds_bucket/)).toBe(true)
    expect(has(/histogram_quantile\(0\.95,.*callgate_agent_response_latency_seconds_bucket/)).toBe(true)
    expect(has(/by \(trigger\).*callgate_fallbacks_total/)).toBe(true)
    expect(has(/callgate_breaker_occurrences_total/)).toBe(true)
    expect(has(/callgate_webhook_deliveries_total/)).toBe(true)
    expect(has(/callgate_nodejs_eventloop_lag_p99_seconds/)).toBe(true)
  })

  it("docs/observability.md names every metric /metrics exports", () => {
    for (const name of exported.keys()) expect(metricsDoc, name).toContain(`\`${name}\``)
  })
})
