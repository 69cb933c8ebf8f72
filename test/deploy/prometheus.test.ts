import { type ChildProcess, execFile, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { startSilentAgent } from "../../examples/agents/silent-agent.js"
import { readUlawFile, speechLike } from "../../sim/AudioSource.js"
import { twilioSid } from "../../sim/CallEntry.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import type { SimCall } from "../../sim/SimCall.js"
import { placeTwilioCall } from "../../sim/TwilioCall.js"
import { type Gateway, startGateway, until } from "../livecall/callHarness.js"
import { freePort } from "../support/redisServer.js"
import { ADMIN_KEY, uniqueId } from "../support/testApp.js"
import { type Receiver, startReceiver } from "../webhooks/httpsReceiver.js"
import { testWebhookSettings } from "../webhooks/webhookRuntime.js"

/**
 * deploy/prometheus/ for real: Debian's `promtool` checks the rules and the config, then Debian's
 * `prometheus` scrapes a running callgate (scrape and rule evaluation every second) while calls
 * run: answered turns heard through the simulated carrier's marks, an agent `error` rescued, a
 * stalled call tripping the breaker, a webhook delivered and one refused for good. Then every query
 * of deploy/grafana/callgate.json and every alert expression is evaluated through Prometheus's HTTP
 * API: each must parse and return data, except those listed in EMPTY_UNTIL (series that exist only
 * once their event happened; docs/observability.md says so).
 */

const repoRoot = join(import.meta.dirname, "../..")
const RULES = join(repoRoot, "deploy/prometheus/callgate-rules.yml")
const CONFIG = join(repoRoot, "deploy/prometheus/prometheus.yml")
const DASHBOARD = join(repoRoot, "deploy/grafana/callgate.json")
const run = promisify(execFile)

/** Queries that return nothing until their event happens: the metric has labels and no series yet. */
const EMPTY_UNTIL: Record<string, string> = {
  callgate_carrier_requests_total: 'a carrier REST request fails ({outcome="error"})',
  callgate_socket_limit_closes_total: "a socket is closed for a per-socket limit",
  callgate_http_requests_total: 'an HTTP request is answered 5xx ({status=~"5.."})'
}

const greeting = readUlawFile("examples/agents/audio/agent-greeting.ulaw")
const reply = greeting.subarray(5 * FRAME_BYTES, 45 * FRAME_BYTES)

/** A comparison with a number made a `bool` comparison: the series behind an alert, firing or not. */
const signalOf = (expr: string) => expr.replace(/(==|!=|>=|<=|>|<)\s*(?=[\d.]+(\s|$|\)))/g, "$1 bool ")

const alertExpressions = (): Array<{ alert: string; expr: string }> => {
  const rules: Array<{ alert: string; expr: string }> = []
  let alert: string | undefined
  for (const line of readFileSync(RULES, "utf8").split("\n")) {
    const a = /^\s*- alert:\s*(\S+)/.exec(line)
    if (a) alert = a[1]
    const e = /^\s*expr:\s*(.+)$/.exec(line)
    if (e && alert !== undefined) rules.push({ alert, expr: e[1]!.trim() })
  }
  return rules
}

const dashboardQueries = (): Array<{ panel: string; expr: string }> =>
  (JSON.parse(readFileSync(DASHBOARD, "utf8")).panels as Array<any>).flatMap((panel) =>
    (panel.targets ?? []).map((target: any) => ({ panel: panel.title as string, expr: (target.expr as string).replaceAll("$__rate_interval", "1m") }))
  )

describe("Prometheus scraping callgate: the rules and the dashboard's queries", () => {
  let gateway: Gateway
  let hooks: Receiver
  let prometheus: ChildProcess | undefined
  let promBase = ""
  let dir = ""
  const calls: Array<SimCall> = []
  const closers: Array<() => Promise<unknown>> = []

  beforeAll(async () => {
    hooks = await startReceiver((request) => (request.path.startsWith("/refused") ? { status: 410 } : { status: 200 }))
    gateway = await startGateway({ env: testWebhookSettings })
    dir = mkdtempSync(join(tmpdir(), "callgate-prometheus-"))
    const port = await freePort()
    promBase = `http://127.0.0.1:${port}`
    writeFileSync(
      join(dir, "prometheus.yml"),
      [
        "global:",
        "  scrape_interval: 1s",
        "  evaluation_interval: 1s",
        "rule_files:",
        `  - ${RULES}`,
        "scrape_configs:",
        "  - job_name: callgate",
        "    metrics_path: /metrics",
        "    static_configs:",
        `      - targets: ["${new URL(gateway.httpBase).host}"]`,
        ""
      ].join("\n")
    )
    prometheus = spawn(
      "prometheus",
      [`--config.file=${join(dir, "prometheus.yml")}`, `--storage.tsdb.path=${join(dir, "data")}`, `--web.listen-address=127.0.0.1:${port}`],
      { stdio: "ignore" }
    )
  })

  afterAll(async () => {
    await Promise.all(calls.map((call) => call.hangup()))
    await Promise.all(closers.map((close) => close()))
    if (prometheus !== undefined && prometheus.exitCode === null) {
      const exited = new Promise((resolve) => prometheus!.once("exit", resolve))
      prometheus.kill("SIGTERM")
      await exited
    }
    await gateway?.close()
    await hooks?.close()
    if (dir !== "") rmSync(dir, { recursive: true, force: true })
  })

  const query = async (expr: string): Promise<{ status: string; error?: string; data?: { result: Array<unknown> } }> =>
    (await (await fetch(`${promBase}/api/v1/query?query=${encodeURIComponent(expr)}`)).json()) as any

  const placeCall = async (agentId: string, environmentId: string) => {
    const call = await placeTwilioCall({
      gatewayUrl: gateway.httpBase,
      agentId,
      environmentId,
      callSid: twilioSid("CA"),
      to: "+15550100002",
      streamVia: "gateway",
      authToken: gateway.twilio.authToken,
      publicUrl: "https://callgate.test",
      playoutDelayMs: 100
    })
    calls.push(call)
    return call
  }

  it("promtool accepts the rules and the scrape config", async () => {
    const rules = await run("promtool", ["check", "rules", RULES])
    expect(rules.stdout).toMatch(/SUCCESS: \d+ rules found/)
    const config = await run("promtool", ["check", "config", "--syntax-only", CONFIG])
    expect(config.stdout).toContain("SUCCESS")
  })

  it("every dashboard query and alert expression parses and returns data from a callgate that ran calls", async () => {
    // Calls while Prometheus scrapes: two answered turns then the agent's error (a rescue, a delivered
    // session.ended), and a stalled call on an environment whose breaker trips at once (its webhook
    // refuses the delivery for good).
    const answering = uniqueId("agent")
    // agentFailoverTimeout 0: the agent's error is rescued at once (with failover on, the example agent's
    // reopened dial-in socket would take the call back; docs/reliability.md, "Agent failover").
    const { id: answeringEnv } = await gateway.createEnvironment(answering, { webhookUrl: hooks.url("/events"), agentFailoverTimeout: 0 })
    const agent = await startAnsweringAgent({ gatewayUrl: gateway.httpBase, agentId: answering, environmentId: answeringEnv, apiKey: ADMIN_KEY, reply, responseLatencyMs: 100, errorAfterTurns: 2 })
    closers.push(() => agent.close())
    await agent.ready()
    const replies: Array<number> = []
    agent.on("reply", ({ turn }) => replies.push(turn))
    const acted = new Promise((resolve) => agent.once("action", resolve))
    const first = await placeCall(answering, answeringEnv)
    await first.play(speechLike({ durationMs: 1600 }))
    await until(() => replies.length >= 1, "the first answer")
    await first.play(speechLike({ durationMs: 1600 }))
    await acted

    const stalling = uniqueId("agent")
    const { id: stallingEnv } = await gateway.createEnvironment(stalling, {
      webhookUrl: hooks.url("/refused"),
      errorFallbackTimeout: 1,
      errorFallbackOccurrenceThreshold: 1
    })
    const silent = await startSilentAgent({ gatewayUrl: gateway.httpBase, agentId: stalling, environmentId: stallingEnv, apiKey: ADMIN_KEY })
    closers.push(() => silent.close())
    await silent.ready()
    const second = await placeCall(stalling, stallingEnv)
    await second.play(speechLike({ durationMs: 1600 }))
    await second.closed
    await first.closed

    // Prometheus has the calls' ends, the deliveries' outcomes and the heard latencies, and has
    // scraped and evaluated twice more since.
    const scalar = async (expr: string) => {
      const answer = await query(expr)
      const sample = (answer.data?.result[0] as { value?: [number, string] } | undefined)?.value
      return sample === undefined ? Number.NaN : Number(sample[1])
    }
    const settled = async () =>
      (await scalar("sum(callgate_sessions_ended_total)")) >= 2 &&
      (await scalar('sum(callgate_webhook_deliveries_total{outcome="delivered"})')) >= 1 &&
      (await scalar('sum(callgate_webhook_deliveries_total{outcome="failed"})')) >= 1 &&
      (await scalar("sum(callgate_agent_response_played_latency_seconds_count)")) >= 2
    const deadline = Date.now() + 60_000
    while (!(await settled().catch(() => false))) {
      if (Date.now() > deadline) throw new Error("Prometheus did not scrape the calls' metrics")
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
    const scrapes = await scalar('count_over_time(up{job="callgate"}[1h])')
    while ((await scalar('count_over_time(up{job="callgate"}[1h])')) < scrapes + 2) await new Promise((resolve) => setTimeout(resolve, 250))

    // Every rule loaded and evaluated without error.
    const rules = (await (await fetch(`${promBase}/api/v1/rules`)).json()) as any
    const loaded = rules.data.groups.flatMap((group: any) => group.rules) as Array<any>
    expect(loaded.map((rule) => rule.name).sort()).toEqual(alertExpressions().map((rule) => rule.alert).sort())
    for (const rule of loaded) expect({ rule: rule.name, health: rule.health, error: rule.lastError ?? "" }).toEqual({ rule: rule.name, health: "ok", error: "" })

    const checks = [
      ...dashboardQueries().map(({ panel, expr }) => ({ what: `panel "${panel}"`, expr })),
      ...alertExpressions().map(({ alert, expr }) => ({ what: `alert ${alert}`, expr: signalOf(expr) }))
    ]
    for (const { what, expr } of checks) {
      const answer = await query(expr)
      expect({ what, expr, status: answer.status, error: answer.error }).toEqual({ what, expr, status: "success", error: undefined })
      const series = answer.data!.result.length
      const emptyUntil = Object.entries(EMPTY_UNTIL).find(([metric]) => expr.includes(metric))?.[1]
      // Data, or a documented reason why none exists yet.
      expect({ what, expr, answer: series > 0 ? "data" : (emptyUntil ?? "no data") }).toEqual({ what, expr, answer: series > 0 ? "data" : expect.any(String) })
      if (series === 0) expect({ what, expr, emptyUntil }).toEqual({ what, expr, emptyUntil: expect.any(String) })
    }
  })
})
