/**
 * The benchmark's results as one JSON document and as Markdown (the same text is printed to
 * stdout): machine, relay tables for callgate and the bare relay, the comparison against the
 * issue's targets, the fleet's scaling efficiency, and the webhook, breaker, fallback and shedding figures.
 */
import type { BreakerBenchFigures } from "./breaker.js"
import type { FailoverBenchFigures, FailoverModeFigures } from "./failover.js"
import type { FallbackBenchFigures } from "./fallback.js"
import type { FleetBenchFigures, FleetMeasurement } from "./fleet.js"
import { EFFICIENCY_GOAL } from "./fleetScaling.js"
import type { SideBySideFigures, StepFigures, SystemFigures } from "./relayLoad.js"
import { PASS_LOSS_PERCENT, PASS_P99_MS } from "./relayLoad.js"
import type { RecordingBenchFigures } from "./recording.js"
import type { FormatsBenchFigures } from "./formats.js"
import type { RedisCostFigures } from "./redisCost.js"
import type { SheddingBenchFigures, Spread } from "./shedding.js"
import type { TracingBenchFigures } from "./tracing.js"
import type { VersusBenchFigures } from "./versus.js"
import type { WebhookBenchFigures } from "./webhooks.js"

export interface Machine {
  readonly cores: number
  readonly cpuModel: string
  readonly node: string
  readonly platform: string
  readonly memoryGb: number
  /** 1-minute load average when the run started and ended (other work on the machine skews the figures). */
  readonly loadAverage: { readonly atStart: number; readonly atEnd: number }
}

/** A part that could not run: its error, so the rest of the report still stands. */
export interface PartError {
  readonly error: string
}

export interface BenchResults {
  readonly startedAt: string
  readonly durationSeconds: number
  readonly machine: Machine
  readonly settings: {
    readonly steps: ReadonlyArray<number>
    /** The side-by-side CPU steps (absent in results written before they existed). */
    readonly cpuSteps?: ReadonlyArray<number>
    readonly stepSeconds: number
    readonly parts: ReadonlyArray<string>
    readonly quick: boolean
    readonly profile: boolean
    /** How the systems ran: compiled JavaScript on plain node, or the sources through tsx. */
    readonly runtime: "node" | "tsx"
    /** What was measured: a commit, or the working tree on top of one. */
    readonly source: string
  }
  readonly baseline?: SystemFigures | PartError
  readonly gateway?: SystemFigures | PartError
  /** Both systems carrying the same calls at once: CPU per call-second (relayLoad.ts, measureSideBySide). */
  readonly sideBySide?: SideBySideFigures | PartError
  readonly comparison?: Comparison
  readonly fleet?: FleetBenchFigures | PartError
  readonly webhooks?: WebhookBenchFigures | PartError
  readonly breaker?: BreakerBenchFigures | PartError
  readonly fallback?: FallbackBenchFigures | PartError
  /** Shedding at the entry while the breaker is open: the shed call's entry answer, and the silence before the fallback with shedding on and off (shedding.ts). */
  readonly shedding?: SheddingBenchFigures | PartError
  /** Agent failover on one instance and across two: from the agent leg's end to the new agent's start (failover.ts). */
  readonly failover?: FailoverBenchFigures | PartError
  /** Recording on (disk) against off, side by side (recording.ts). */
  readonly recording?: RecordingBenchFigures | PartError
  /** CPU per call-second of a Telnyx call in each audio format, side by side (formats.ts). */
  readonly formats?: FormatsBenchFigures | PartError
  /** Tracing on (OTLP export, 100 % sampling) against off, side by side (tracing.ts). */
  readonly tracing?: TracingBenchFigures | PartError
  /** The working tree (or --ref) against --against REF, side by side (versus.ts). */
  readonly versus?: VersusBenchFigures | PartError
  /** Redis commands and CPU per call set-up and per call-second (redisCost.ts). */
  readonly redis?: RedisCostFigures | PartError
}

export interface Comparison {
  readonly baselineSustained: number | null
  readonly gatewaySustained: number | null
  /** gateway / baseline sustained calls (target >= 0.9). */
  readonly capacityRatio: number | null
  /** Per step both measured: gateway p99 minus baseline p99, the worse direction, ms (target <= 1). */
  readonly addedP99Ms: ReadonlyArray<{ readonly calls: number; readonly carrierToAgent: number; readonly agentToCarrier: number }>
  /** The largest added p99 over the steps the gateway sustained. */
  readonly worstAddedP99Ms: number | null
  /** RSS per call at the gateway's largest sustained step (target <= 100 KB). */
  readonly gatewayRssPerCallKb: number | null
  /** Per ramp step both measured, one after the other: callgate's CPU per call-second over the relay's. */
  readonly cpuRatioPerStep: ReadonlyArray<{ readonly calls: number; readonly ratio: number }>
  /** Per side-by-side step: the same with both loaded at once, windows pooled (target <= 1.1 at every one). */
  readonly cpuRatioSideBySide: ReadonlyArray<{ readonly calls: number; readonly ratio: number }>
  readonly targets: {
    readonly capacityAtLeast90Percent: boolean | null
    readonly addedP99AtMost1Ms: boolean | null
    readonly rssAtMost100KbPerCall: boolean | null
    /** Null when no side-by-side step ran. */
    readonly cpuAtMost110PercentOfRelay: boolean | null
  }
}

export const isError = (value: unknown): value is PartError => typeof value === "object" && value !== null && "error" in value

const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits

/** callgate's CPU per call-second may be at most this multiple of the bare relay's (the issue's target). */
export const CPU_RATIO_GOAL = 1.1

export const compare = (baseline: SystemFigures, gateway: SystemFigures, sideBySide?: SideBySideFigures): Comparison => {
  const addedP99Ms = gateway.steps.flatMap((g) => {
    const b = baseline.steps.find((s) => s.calls === g.calls)
    if (b === undefined) return []
    return [
      {
        calls: g.calls,
        carrierToAgent: round(g.carrierToAgent.delayMs.p99 - b.carrierToAgent.delayMs.p99),
        agentToCarrier: round(g.agentToCarrier.delayMs.p99 - b.agentToCarrier.delayMs.p99)
      }
    ]
  })
  const sustainedSteps = addedP99Ms.filter((a) => gateway.sustainedCalls !== null && a.calls <= gateway.sustainedCalls)
  const worst = sustainedSteps.length > 0 ? Math.max(...sustainedSteps.map((a) => Math.max(a.carrierToAgent, a.agentToCarrier))) : null
  const ratio = baseline.sustainedCalls && gateway.sustainedCalls !== null ? round(gateway.sustainedCalls / baseline.sustainedCalls) : null
  const atSustained = gateway.steps.find((s) => s.calls === gateway.sustainedCalls)
  const rss = atSustained ? atSustained.system.rssPerCallKb : null
  const cpuRatioPerStep = gateway.steps.flatMap((g) => {
    const b = baseline.steps.find((s) => s.calls === g.calls)
    return b === undefined || !(b.system.cpuMsPerCallSecond > 0) ? [] : [{ calls: g.calls, ratio: round(g.system.cpuMsPerCallSecond / b.system.cpuMsPerCallSecond) }]
  })
  const cpuRatioSideBySide = (sideBySide?.steps ?? []).map((step) => ({ calls: step.calls, ratio: step.ratio }))
  return {
    baselineSustained: baseline.sustainedCalls,
    gatewaySustained: gateway.sustainedCalls,
    capacityRatio: ratio,
    addedP99Ms,
    worstAddedP99Ms: worst,
    gatewayRssPerCallKb: rss,
    cpuRatioPerStep,
    cpuRatioSideBySide,
    targets: {
      cpuAtMost110PercentOfRelay: cpuRatioSideBySide.length === 0 ? null : cpuRatioSideBySide.every((step) => step.ratio <= CPU_RATIO_GOAL),
      capacityAtLeast90Percent: ratio === null ? null : ratio >= 0.9,
      addedP99AtMost1Ms: worst === null ? null : worst <= 1,
      rssAtMost100KbPerCall: rss === null ? null : rss <= 100
    }
  }
}

const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string | number>>) =>
  [`| ${header.join(" | ")} |`, `|${header.map(() => "---").join("|")}|`, ...rows.map((r) => `| ${r.join(" | ")} |`)].join("\n")

const lossCell = (d: StepFigures["carrierToAgent"]) => `${d.lost}/${d.sent} (${d.lossPercent} %)`
const delayCell = (d: StepFigures["carrierToAgent"]) => `${d.delayMs.p50} / ${d.delayMs.p99} / ${d.delayMs.max}`

const relaySection = (title: string, figures: SystemFigures | PartError | undefined): string => {
  if (figures === undefined) return ""
  if (isError(figures)) return `### ${title}\n\nDid not run: ${figures.error.split("\n")[0]}\n`
  const rows = figures.steps.map((s) => [
    s.calls,
    s.openCalls,
    lossCell(s.carrierToAgent),
    delayCell(s.carrierToAgent),
    lossCell(s.agentToCarrier),
    delayCell(s.agentToCarrier),
    s.system.cpuPercent,
    s.system.cpuMsPerCallSecond,
    s.system.rssMb,
    s.system.rssPerCallKb,
    s.system.heapPerCallKb,
    `${s.carrierSim.cpuPercent} / ${s.agentSim.cpuPercent}`,
    `${s.carrierSim.loopDelayMs.p99} / ${s.agentSim.loopDelayMs.p99}`,
    s.remeasuredAfterOtherCpuPercent !== undefined ? `${s.otherCpuPercent} (2nd try; 1st ${s.remeasuredAfterOtherCpuPercent})` : s.otherCpuPercent,
    `${s.turns.spoken} / ${s.turns.answered}`,
    s.pass ? "pass" : `**fail**: ${s.problems.join("; ")}`
  ])
  const lines = [
    `### ${title}`,
    "",
    `Idle RSS ${figures.idleRssMb} MB. Sustained (< ${PASS_LOSS_PERCENT} % lost, p99 < ${PASS_P99_MS} ms both ways, no call failed or cut): ` +
      `**${figures.sustainedCalls ?? "none"}** concurrent calls.` +
      (figures.stoppedEarly ? ` Ramp stopped: ${figures.stoppedEarly}.` : ""),
    "",
    table(
      [
        "calls",
        "open",
        "carrier→agent lost",
        "c→a delay p50/p99/max ms",
        "agent→carrier lost",
        "a→c delay p50/p99/max ms",
        "CPU %",
        "CPU ms per call·s",
        "RSS MB",
        "RSS KB per call",
        "heap+ext KB per call",
        "sim CPU % (carrier/agent)",
        "sim timer lateness p99 ms",
        "other CPU %",
        "caller turns / answers heard",
        "verdict"
      ],
      rows
    )
  ]
  const setupErrors = figures.steps.flatMap((s) => s.setupErrors.map((e) => `- ${s.calls} calls: ${e}`))
  if (setupErrors.length > 0) lines.push("", "Call setup errors (first few):", "", ...setupErrors.slice(0, 6))
  if (figures.profile) {
    const p = figures.profile
    lines.push(
      "",
      `CPU profile (\`${p.file}\`): ${p.busyMs} ms busy of ${p.sampledMs} ms sampled${p.windowed ? " in the measurement windows" : " (whole run)"}. Self time:`,
      "",
      table(["area", "self ms", "% of busy"], p.byArea.map((e) => [e.name, e.selfMs, e.percent])),
      "",
      table(["function", "self ms", "% of busy"], p.topFunctions.map((e) => [`\`${e.name}\``, e.selfMs, e.percent]))
    )
  }
  return lines.join("\n") + "\n"
}

const met = (value: boolean | null) => (value === null ? "not measured" : value ? "met" : "**not met**")

const sideBySideSection = (figures: SideBySideFigures | PartError | undefined): string => {
  if (figures === undefined) return ""
  if (isError(figures)) return `### CPU side by side\n\nDid not run: ${figures.error.split("\n")[0]}\n`
  const rows = figures.steps.flatMap((step) => [
    ...step.windows.map((w, i) => [
      step.calls,
      i + 1,
      `${w.baselineOpen} / ${w.gatewayOpen}`,
      w.baselineMsPerCallSecond,
      w.gatewayMsPerCallSecond,
      `${w.ratio}x`,
      w.worstLossPercent,
      w.worstP99Ms,
      w.machineCpuPercent
    ]),
    [step.calls, "pooled", "", "", "", `**${step.ratio}x**`, "", "", ""]
  ])
  return [
    "### CPU side by side",
    "",
    `Both systems carry the same number of calls at once (each with its own simulators), measured over the same ${figures.windowSeconds} s windows: ` +
      "whatever the host does meanwhile, it does to both. Pooled: callgate's CPU per call-second summed over the windows, over the relay's. " +
      "Delays are not judged here (the machine carries twice the calls); loss and p99 say the calls carried their traffic.",
    "",
    table(
      ["calls (each)", "window", "open (relay / callgate)", "relay CPU ms per call·s", "callgate CPU ms per call·s", "ratio", "worst loss %", "worst p99 ms", "machine CPU %"],
      rows
    ),
    ""
  ].join("\n")
}

const comparisonSection = (c: Comparison | undefined) => {
  if (c === undefined) return ""
  return [
    "### callgate against the bare relay (the relay targets)",
    "",
    table(
      ["target", "measured", "verdict"],
      [
        [
          "sustains >= 90 % of the bare relay's concurrent calls",
          `${c.gatewaySustained ?? "none"} vs ${c.baselineSustained ?? "none"} (${c.capacityRatio === null ? "n/a" : `${Math.round(c.capacityRatio * 100)} %`})`,
          met(c.targets.capacityAtLeast90Percent)
        ],
        ["adds <= 1 ms p99 over the bare relay", c.worstAddedP99Ms === null ? "n/a" : `${c.worstAddedP99Ms} ms (worst step sustained)`, met(c.targets.addedP99AtMost1Ms)],
        ["<= 100 KB RSS per active call", c.gatewayRssPerCallKb === null ? "n/a" : `${c.gatewayRssPerCallKb} KB`, met(c.targets.rssAtMost100KbPerCall)],
        [
          `CPU per call-second <= ${CPU_RATIO_GOAL}x the bare relay's (side by side)`,
          c.cpuRatioSideBySide.map((step) => `${step.calls} calls: ${step.ratio}x`).join("; ") || "n/a",
          met(c.targets.cpuAtMost110PercentOfRelay)
        ]
      ]
    ),
    "",
    "Added p99 delay per step (callgate p99 minus bare relay p99, ms): " +
      (c.addedP99Ms.map((a) => `${a.calls} calls: c→a ${a.carrierToAgent}, a→c ${a.agentToCarrier}`).join("; ") || "none"),
    "",
    "CPU per call-second, callgate over the bare relay, per ramp step (one system after the other, so the host's drift between the two windows is in it): " +
      (c.cpuRatioPerStep.map((step) => `${step.calls}: ${step.ratio}x`).join("; ") || "none"),
    ""
  ].join("\n")
}

const fleetRow = (m: FleetMeasurement) => {
  const sustained = isError(m.ramp) ? `did not run: ${m.ramp.error.split("\n")[0]}` : String(m.ramp.sustainedCalls ?? "none")
  return [`${m.instances} (core${m.instanceCores.length > 1 ? "s" : ""} ${m.instanceCores.join(", ")})`, sustained, `${m.limiter.kind}: ${m.limiter.reason}`]
}

const fleetSection = (f: FleetBenchFigures | PartError | undefined) => {
  if (f === undefined) return ""
  if (isError(f)) return `### Fleet scaling\n\nDid not run: ${f.error.split("\n")[0]}\n`
  const ramps = [f.one, f.two].flatMap((m) => (isError(m.ramp) ? [] : [relaySection(`Fleet of ${m.instances}, step by step`, m.ramp)]))
  return [
    `### Fleet scaling (goal: efficiency >= ${EFFICIENCY_GOAL} wherever the load generator is not the limit)`,
    "",
    `Instances on one Redis behind nginx (deploy/nginx/callgate.conf, ${f.layout.nginxWorkers} worker${f.layout.nginxWorkers === 1 ? "" : "s"}), each pinned to its own core; ` +
      `agents dial in and calls are placed through nginx. ${f.layout.note.charAt(0).toUpperCase()}${f.layout.note.slice(1)}.`,
    "",
    table(["instances", "calls sustained", "limit (read at the first failing step)"], [fleetRow(f.one), fleetRow(f.two)]),
    "",
    `Scaling efficiency c2 / (2 x c1) = ${f.c2 ?? "none"} / (2 x ${f.c1 ?? "none"}) = **${f.efficiency ?? "n/a"}**; verdict: ${f.verdict.met === false ? `**${f.verdict.text}**` : f.verdict.text}.`,
    "",
    "Step tables: CPU % is the instances' sum; the per-process CPU (each instance, nginx, Redis) is in latest.json (`processes` of each step).",
    "",
    ...ramps
  ].join("\n")
}

const webhookSection = (w: WebhookBenchFigures | PartError | undefined) => {
  if (w === undefined) return ""
  if (isError(w)) return `### Webhooks\n\nDid not run: ${w.error.split("\n")[0]}\n`
  const l = w.latency.enqueueToFirstAttemptMs
  return [
    "### Webhook deliveries",
    "",
    table(
      ["figure", "value", "target"],
      [
        [`drain: ${w.drain.deliveries} queued deliveries`, `${w.drain.deliveriesPerSecond}/s`, ">= 1000/s"],
        [`pipeline: ${w.pipeline.deliveries} enqueued while delivering`, `${w.pipeline.deliveriesPerSecond}/s`, ">= 1000/s"],
        [`enqueue to first attempt at ${w.latency.ratePerSecond}/s (${w.latency.events} events)`, `p50 ${l.p50} ms, p99 ${l.p99} ms, max ${l.max} ms`, "p99 < 50 ms"]
      ]
    ),
    "",
    `Redis: ${w.redis}; worker concurrency ${w.concurrency.overall} (per host ${w.concurrency.perHost}). Targets: deliveries/s ${met(w.targets.deliveriesPerSecondAtLeast1000)}, p99 ${met(w.targets.p99Below50ms)}.`,
    ""
  ].join("\n")
}

const breakerSection = (b: BreakerBenchFigures | PartError | undefined) => {
  if (b === undefined) return ""
  if (isError(b)) return `### Breaker timing\n\nDid not run: ${b.error.split("\n")[0]}\n`
  const o = b.occurrenceLatenessMs
  const e = b.latencyErrorMs
  return [
    "### Turn timing and breaker precision",
    "",
    table(
      ["figure", "value", "target"],
      [
        [`occurrence recorded after its deadline (${b.sessions} sessions, ${b.store} store)`, `p50 ${o.p50} ms, p99 ${o.p99} ms, max ${o.max} ms (${o.count})`, "p99 < 20 ms"],
        ["measured turn latency vs the agent's actual", `p50 ${e.p50} ms, p99 ${e.p99} ms, max ${e.max} ms; ${Math.round(e.withinOneFrame * 1000) / 10} % within 20 ms (${e.count})`, "within 20 ms"],
        ["caller sentences / turns detected / matched", `${b.callerSentences} / ${b.turnsDetected} / ${b.turnsMatched}`, ""],
        ...(b.turnAccount === undefined
          ? []
          : [
              [
                "every caller sentence accounted for",
                `${b.turnAccount.sentences} played: ${b.turnAccount.detected} detected, ${b.turnAccount.overlap} overlap, ${b.turnAccount.merge} merge, ` +
                  `${b.turnAccount.unfinished} unfinished at the window's end, **${b.turnAccount.miss} miss**; extra turns: ` +
                  `${b.turnAccount.extraSplit} split, ${b.turnAccount.extraNoise} on noise`,
                "0 miss, 0 on noise"
              ]
            ]),
        ["event-loop delay", `p50 ${b.eventLoopDelayMs.p50} ms, p99 ${b.eventLoopDelayMs.p99} ms`, ""]
      ]
    ),
    ""
  ].join("\n")
}

const delayRow = (name: string, d: FallbackBenchFigures["breakerTrip"]) => [
  name,
  d.count === 0 ? "no carrier request" : `p50 ${d.p50} ms, p99 ${d.p99} ms, max ${d.max} ms`,
  `${d.count}${d.missing > 0 ? ` (${d.missing} got none)` : ""}${d.endedEarly > 0 ? ` (${d.endedEarly} ended early)` : ""}`,
  Object.entries(d.requests)
    .map(([k, v]) => `${k} x${v}`)
    .join(", ")
]

const fallbackSection = (f: FallbackBenchFigures | PartError | undefined) => {
  if (f === undefined) return ""
  if (isError(f)) return `### Fallback delay\n\nDid not run: ${f.error.split("\n")[0]}\n`
  const histogram = Object.entries(f.gatewayHistogram)
  return [
    "### Hard error to carrier request (target p99 < 50 ms)",
    "",
    table(
      ["trigger", "delay", "calls", "carrier requests"],
      [
        delayRow("agent socket dropped, fallback disabled", f.agentDrop.disabled),
        delayRow("agent socket dropped, phone fallback", f.agentDrop.phone),
        delayRow("breaker trip (from the deadline)", f.breakerTrip)
      ]
    ),
    "",
    `First hard error after start-up (measured apart): ${f.firstAfterStartMs} ms.` +
      (histogram.length > 0
        ? ` callgate's own histogram: ${histogram.map(([k, v]) => `${k}: p50 <= ${v.p50AtMostMs} ms, p99 <= ${v.p99AtMostMs} ms (${v.count})`).join("; ")}.`
        : ""),
    ""
  ].join("\n")
}

const spreadCell = (s: Spread) => (s.count === 0 ? "none" : `p50 ${s.p50} ms, p99 ${s.p99} ms, max ${s.max} ms (${s.count})`)

const sheddingSection = (f: SheddingBenchFigures | PartError | undefined) => {
  if (f === undefined) return ""
  if (isError(f)) return `### Shedding\n\nDid not run: ${f.error.split("\n")[0]}\n`
  return [
    "### Shedding at the entry while the breaker is open (target: entry answer p99 < 50 ms, no agent involved)",
    "",
    table(
      ["figure", "value", "target"],
      [
        [`entry request to entry answer, shed call (the fallback's <Dial>), ${f.perSecond} calls/s`, spreadCell(f.shedEntryMs), "p99 < 50 ms"],
        ["the same, one request at a time", spreadCell(f.shedEntryOneAtATimeMs), "p99 < 50 ms"],
        ["callgate CPU per shed entry (user + system, over both)", `${f.cpuMsPerShedEntry} ms`, ""],
        ["shed answers that were not the fallback / agent calls while shedding", `${f.notFallback} / ${f.agentCallsWhileShedding}`, "0 / 0"],
        ["silence before the fallback, shedding on (entry to the <Dial>)", spreadCell(f.silenceMs.shedOn), ""],
        [
          `silence before the fallback, shedding off (entry to the REST transfer; errorFallbackTimeout ${f.timeoutSeconds} s)`,
          spreadCell(f.silenceMs.shedOff) + (f.silenceMs.shedOffMissing > 0 ? `; ${f.silenceMs.shedOffMissing} got none` : ""),
          ""
        ],
        ["shedding off, from the caller's last word", spreadCell(f.silenceMs.shedOffAfterLastWord), ""]
      ]
    ),
    "",
    `First shed entry after start-up (measured apart): ${f.firstShedEntryMs} ms. callgate counted ${f.gatewayShedCount} shed calls (warm-up included).`,
    ""
  ].join("\n")
}

/** One failover mode's paragraph: the drops, the takeovers, the gap from the drop to the new agent's `start`. */
const failoverFigures = (f: FailoverModeFigures, carrier: string) =>
  `${f.failovers} of ${f.calls} live calls had their agent socket dropped (no close frame); ${f.reattached} were taken over by another agent` +
  `${f.missing > 0 ? `, ${f.missing} were not` : ""}. From the drop to the new agent's \`start\`: **p50 ${f.p50} ms, p99 ${f.p99} ms**, max ${f.max} ms. ` +
  carrier +
  (f.gatewayHistogram !== null
    ? ` callgate's own callgate_agent_failover_gap_seconds: p50 <= ${f.gatewayHistogram.p50AtMostMs} ms, p99 <= ${f.gatewayHistogram.p99AtMostMs} ms (${f.gatewayHistogram.count}).`
    : "")

const failoverSection = (f: FailoverBenchFigures | PartError | undefined) => {
  if (f === undefined) return ""
  if (isError(f)) return `### Agent failover\n\nDid not run: ${f.error.split("\n")[0]}\n`
  const lines: Array<string> = []
  if (f.sameInstance !== undefined) {
    lines.push("### Agent failover, same instance (target p99 < 250 ms)", "")
    lines.push(
      "error" in f.sameInstance
        ? `Did not run: ${f.sameInstance.error.split("\n")[0]}`
        : failoverFigures(f.sameInstance, `Carrier requests meanwhile: ${f.sameInstance.carrierRequests} (a fallback would make one).`),
      ""
    )
  }
  if (f.acrossInstances !== undefined) {
    lines.push("### Agent failover, across instances (target p99 < 1.5 s)", "")
    lines.push(
      "error" in f.acrossInstances
        ? `Did not run: ${f.acrossInstances.error.split("\n")[0]}`
        : "Two instances on one redis-server, every call on A, the idle agents on B; the carrier on loopback moves each stream to B on A's call update. " +
            failoverFigures(
              f.acrossInstances,
              `Call updates (moves): ${f.acrossInstances.moves}; other carrier requests: ${f.acrossInstances.carrierRequests} (a fallback would make one).`
            ),
      ""
    )
  }
  return lines.join("\n")
}

export const renderMarkdown = (r: BenchResults): string =>
  [
    `# callgate benchmark, ${r.startedAt}`,
    "",
    `Machine: ${r.machine.cores} cores (${r.machine.cpuModel}), ${r.machine.memoryGb} GB, Node ${r.machine.node} on ${r.machine.platform}. ` +
      `Load average at start/end: ${r.machine.loadAverage.atStart} / ${r.machine.loadAverage.atEnd}. Run took ${r.durationSeconds} s` +
      ` (steps ${r.settings.steps.join(", ")}; ${r.settings.stepSeconds} s measured per step${r.settings.quick ? "; quick run" : ""}).` +
      ` The systems ran ${r.settings.runtime === "node" ? "as compiled JavaScript on plain node (as npm start)" : "from the sources through tsx (as npm run dev)"}; built from the ${r.settings.source}.\n`,
    "",
    r.baseline || r.gateway
      ? "Relay: delay is one way, from the frame's send stamp to its receipt, over the frames sent in the measured window; " +
        "CPU and RSS are the system process's own (/proc); memory is read after a full garbage collection and compared with the idle process after a warm-up. Simulator columns show when the load generator itself was busy; " +
        "\"other CPU\" is what the rest of the machine used meanwhile (percent of one core; high values mean the delays are the machine's).\n"
      : "",
    relaySection("Bare relay (baseline)", r.baseline),
    relaySection("callgate", r.gateway),
    sideBySideSection(r.sideBySide),
    comparisonSection(r.comparison),
    fleetSection(r.fleet),
    webhookSection(r.webhooks),
    recordingSection(r.recording),
    formatsSection(r.formats),
    tracingSection(r.tracing),
    redisSection(r.redis),
    versusSection(r.versus),
    breakerSection(r.breaker),
    fallbackSection(r.fallback),
    sheddingSection(r.shedding),
    failoverSection(r.failover)
  ]
    .filter((section) => section !== "")
    .join("\n")

/** Tracing on (every span exported over OTLP/HTTP) against off: CPU per call-second side by side. */
const tracingSection = (figures: TracingBenchFigures | PartError | undefined): string => {
  if (figures === undefined) return ""
  if (isError(figures)) return `## Tracing\n\nFailed: ${figures.error}\n`
  const rows = figures.windows.map((w, i) => `| ${i + 1} | ${w.offOpen} / ${w.onOpen} | ${w.offMsPerCallSecond} | ${w.onMsPerCallSecond} | ${w.ratio}x |`)
  return [
    "## Tracing",
    "",
    `${figures.calls} calls on each of two callgates at once, one exporting every span over OTLP/HTTP (protobuf, \`OTEL_TRACES_SAMPLER=always_on\`) to a sink on loopback, one with no endpoint (tracing off: docs/observability.md); windows of ${figures.windowSeconds} s.`,
    "",
    "| window | calls open (off / on) | CPU ms per call-s, off | on | on / off |",
    "|---|---|---|---|---|",
    ...rows,
    "",
    `Pooled: tracing on costs ${figures.ratio}x the CPU of off (goal: within 1.05x); ${figures.exports} exports, ${Math.round(figures.exportedBytes / 1024)} KB of spans received.`,
    ""
  ].join("\n")
}

/** One commit against another: CPU per call-second side by side, and memory per call of each. */
const versusSection = (figures: VersusBenchFigures | PartError | undefined): string => {
  if (figures === undefined) return ""
  if (isError(figures)) return `## One commit against another\n\nFailed: ${figures.error}\n`
  const rows = figures.windows.map(
    (w, i) =>
      `| ${i + 1} | ${w.againstOpen} / ${w.currentOpen} | ${w.againstMsPerCallSecond} | ${w.currentMsPerCallSecond} | ${w.ratio}x | ${w.againstRssPerCallKb} / ${w.currentRssPerCallKb} | ${w.againstHeapPerCallKb} / ${w.currentHeapPerCallKb} | ${w.againstObjectsPerCallKb} / ${w.currentObjectsPerCallKb} |`
  )
  return [
    "## One commit against another",
    "",
    `${figures.calls} calls on each of two callgates at once: "against" is ${figures.against}, "current" is ${figures.current} (started ${figures.startedFirst === "current" ? "first" : "second"}); windows of ${figures.windowSeconds} s.`,
    "",
    "| window | calls open (against / current) | CPU ms per call-s, against | current | current / against | RSS per call KB (against / current) | heap + external per call KB | the same without V8's code KB |",
    "|---|---|---|---|---|---|---|---|",
    ...rows,
    "",
    `Pooled: the current build costs ${figures.ratio}x the CPU of the other` +
      (figures.ratioInterval !== undefined ? ` (the windows' ratio, 95 % interval: ${figures.ratioInterval[0]}x to ${figures.ratioInterval[1]}x)` : "") +
      `; RSS per call ${figures.againstRssPerCallKb} against ${figures.currentRssPerCallKb} KB, heap + external ${figures.againstHeapPerCallKb} against ${figures.currentHeapPerCallKb} KB, ` +
      `and without V8's code and bytecode ${figures.againstObjectsPerCallKb} against ${figures.currentObjectsPerCallKb} KB (medians).`,
    ""
  ].join("\n")
}

/** A callgate per Telnyx audio format, side by side: CPU per call-second of each, and its frames' delay. */
const formatsSection = (figures: FormatsBenchFigures | PartError | undefined): string => {
  if (figures === undefined) return ""
  if (isError(figures)) return `## Audio formats\n\nFailed: ${figures.error}\n`
  return [
    "## Audio formats",
    "",
    `${figures.calls} Telnyx TeXML calls on each of ${figures.formats.length} callgates at once, one per telnyxStreamCodec, the agents speaking the same format; windows of ${figures.windowSeconds} s` +
      (figures.skippedWindows > 0 ? ` (in ${figures.skippedWindows} window(s) fewer than 90 % of some format's calls were up: left out of that format's figures)` : "") +
      ".",
    "",
    "| format | CPU ms per call-second | over mu-law | p99 ms carrier->agent | agent->carrier | loss % (each way) | turns answered |",
    "|---|---|---|---|---|---|---|",
    ...figures.formats.map(
      (f) =>
        // A lossy format (A-law over the simulators' mu-law, G.722) alters the frames' stamps: their delay and loss cannot be read.
        f.carrierToAgent.unstamped > 0 || f.agentToCarrier.unstamped > 0
          ? `| ${f.format} | ${f.msPerCallSecond} | ${f.ratioToMulaw}x | n/a | n/a | n/a (stamps altered by the codec) | ${f.turnsAnswered} of ${f.turnsSpoken} |`
          : `| ${f.format} | ${f.msPerCallSecond} | ${f.ratioToMulaw}x | ${f.carrierToAgent.p99Ms} | ${f.agentToCarrier.p99Ms} | ${f.carrierToAgent.lossPercent} / ${f.agentToCarrier.lossPercent} | ${f.turnsAnswered} of ${f.turnsSpoken} |`
    ),
    ""
  ].join("\n")
}

/** Recording on (disk) against off: CPU per call-second side by side, and the write system calls it adds. */
const recordingSection = (figures: RecordingBenchFigures | PartError | undefined): string => {
  if (figures === undefined) return ""
  if (isError(figures)) return `## Call recording\n\nFailed: ${figures.error}\n`
  const rows = figures.windows.map(
    (w, i) =>
      `| ${i + 1} | ${w.offOpen} / ${w.onOpen} | ${w.offMsPerCallSecond} | ${w.onMsPerCallSecond} | ${w.ratio}x | ${w.recordingWritesPerCallSecond} | ${w.offSyscwPerCallSecond} / ${w.onSyscwPerCallSecond} |`
  )
  return [
    "## Call recording",
    "",
    `${figures.calls} calls on each of two callgates at once, one recording every call to disk (docs/recording.md, "Cost"); windows of ${figures.windowSeconds} s.`,
    "",
    "| window | calls open (off / on) | CPU ms per call-s, off | on | on / off | recording writes per call-s | write syscalls per call-s (off / on) |",
    "|---|---|---|---|---|---|---|",
    ...rows,
    "",
    `Pooled${figures.skippedWindows > 0 ? ` (without the ${figures.skippedWindows} window(s) in which fewer than 90 % of the calls were up)` : ""}: recording on costs ${figures.ratio}x the CPU of off; ${figures.recordingWritesPerCallSecond} recording writes per call per second; ` +
      `${figures.extraSyscwPerCallSecond} more write system calls per call per second than off (kernel count); ${Math.round(figures.recordedBytes / 1024)} KB recorded.`,
    ""
  ].join("\n")
}

/** What one Redis carries: commands and Redis CPU per call set-up and per call-second (docs/scaling.md, "Sizing Redis"). */
const redisSection = (figures: RedisCostFigures | PartError | undefined): string => {
  if (figures === undefined) return ""
  if (isError(figures)) return `## What one Redis carries\n\nFailed: ${figures.error}\n`
  const { setups, steady, idle } = figures
  const top = (list: RedisCostFigures["setups"]["byCommand"], count: number) =>
    list
      .slice(0, count)
      .map(({ command, perUnit }) => `${command} ${perUnit}`)
      .join(", ")
  return [
    "## What one Redis carries",
    "",
    `One callgate on its own redis-server ${figures.redisVersion} (no replica), session.ended delivered to an HTTPS receiver; Redis's own counters (\`INFO commandstats\`, \`INFO cpu\` used_cpu_sys + used_cpu_user) read around each phase. ` +
      `Commands are every command Redis ran, those inside Lua scripts included; scripts are the EVALSHA round trips among them. ` +
      `Subtracted from both phases: the idle instance's own cost (${idle.commandsPerSecond} commands and ${idle.cpuMsPerSecond} ms of Redis CPU a second, over ${idle.seconds} s), ` +
      `and each idle dial-in agent socket's (${figures.idleAgentSocket.commandsPerSecond} commands and ${figures.idleAgentSocket.cpuMsPerSecond} ms a second, measured with ${figures.idleAgentSocket.pool}: the registry republishes every idle socket). ` +
      `Set-ups run in batches of the pool's size, so each republishes up to ${figures.idleAgentSocket.pool} idle sockets.`,
    "",
    "| | calls | commands | scripts | Redis CPU ms |",
    "|---|---|---|---|---|",
    `| per call set-up (and ending) | ${setups.calls} placed${setups.failed > 0 ? ` (${setups.failed} failed)` : ""}, ${setups.delivered} session.ended | ${setups.commandsPerSetup} | ${setups.scriptsPerSetup} | ${setups.cpuMsPerSetup} |`,
    `| per call-second | ${steady.calls} for ${steady.seconds} s | ${steady.commandsPerCallSecond} | ${steady.scriptsPerCallSecond} | ${steady.cpuMsPerCallSecond} (from the commands: ${steady.cpuMsPerCallSecondFromCommands}) |`,
    ...(figures.withReplica !== undefined
      ? [
          `| per call set-up, a replica attached (REDIS_WAIT_REPLICAS=auto waits for it) | ${figures.withReplica.setups.calls} placed${figures.withReplica.setups.failed > 0 ? ` (${figures.withReplica.setups.failed} failed)` : ""}, ${figures.withReplica.setups.delivered} session.ended | ${figures.withReplica.setups.commandsPerSetup} | ${figures.withReplica.setups.scriptsPerSetup} | ${figures.withReplica.setups.cpuMsPerSetup} |`
        ]
      : []),
    "",
    `Per set-up, by command: ${top(setups.byCommand, 16)}.`,
    "",
    `Per call-second, by command: ${top(steady.byCommand, 10)}.`,
    "",
    ...(figures.withReplica !== undefined
      ? [
          `With the replica, per set-up, by command: ${top(figures.withReplica.setups.byCommand, 16)} (the primary's own figures; idle with the replica ${figures.withReplica.idle.commandsPerSecond} commands and ${figures.withReplica.idle.cpuMsPerSecond} ms a second, subtracted).`,
          ""
        ]
      : []),
    `The set-up phase's calls were up ${setups.callSeconds} call-seconds in all (estimated from the ramp), subtracted at the per call-second rate. ` +
      `Per call-second CPU "from the commands" is the commands at the set-up phase's Redis CPU per command: a cross-check where the calls' own CPU is lost in the idle instance's. ` +
      `One fully busy Redis core would carry ${figures.oneCore.setupsPerSecond} call set-ups a second, or ${figures.oneCore.concurrentCalls} concurrent calls at the larger per call-second figure (CPU alone, no headroom).`,
    ""
  ].join("\n")
}
