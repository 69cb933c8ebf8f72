import { html } from "htm/preact"
import { useCallback, useMemo, useState } from "preact/hooks"
import type uPlot from "uplot"
import {
  type AgentAudioFormat,
  ApiFailure,
  api,
  type BreakerState,
  type Delivery,
  type Environment,
  type FallbackType,
  type Session,
  type TelnyxStreamCodec,
  type WebhookSignatureScheme
} from "./api.js"
import { barsPath, Chart, Confirm, Dialog, ErrorLine, Field, fieldErrors, href, SecretOnce, time, usePoll } from "./components.js"
import { DeliveryTable, SessionTable } from "./pages.js"
import { answeredTurns, histogram, perMinutePercentiles, sessionCounts } from "./stats.js"

const HOUR_MS = 3600_000

/** The environment's sessions of the last hour (newest first), a few pages at most. */
const recentSessions = async (agentId: string, environmentId: string): Promise<Array<Session>> => {
  const since = Date.now() - HOUR_MS
  const all: Array<Session> = []
  let cursor: string | undefined
  for (let page = 0; page < 5; page++) {
    const answer = await api.sessions(agentId, { environmentId, limit: 100, ...(cursor !== undefined ? { cursor } : {}) })
    all.push(...answer.sessions)
    const oldest = answer.sessions[answer.sessions.length - 1]
    if (answer.nextCursor === null || oldest === undefined || Date.parse(oldest.createdAt) < since) break
    cursor = answer.nextCursor
  }
  return all.filter((s) => Date.parse(s.createdAt) >= since || s.status === "active")
}

// ---- Call Limits ----

/** The environment's fleet-wide limits (docs/scaling.md, "Fleet-wide call limits"). */
/**
 * A settings panel's save: the form's patch goes to the API, then "Saved." (or the API's error, by
 * field) shows, and the page gets the environment as stored. `saved` sees it first (a new secret).
 */
const useEnvironmentSave = (env: Environment, onSaved: (env: Environment) => void) => {
  const [error, setError] = useState<unknown>(null)
  const [status, setStatus] = useState<string | null>(null)
  const submit = (patch: () => Record<string, unknown>, saved?: (next: Environment) => void) => async (event: Event) => {
    event.preventDefault()
    setError(null)
    setStatus(null)
    try {
      const next = await api.updateEnvironment(env.agentId, env.id, patch())
      saved?.(next)
      setStatus("Saved.")
      onSaved(next)
    } catch (failure) {
      setError(failure)
    }
  }
  return { error, setError, status, setStatus, submit }
}

const CallLimits = (props: { env: Environment; onSaved: (env: Environment) => void }) => {
  const { env } = props
  const [total, setTotal] = useState(env.maxConcurrentCalls === null ? "" : String(env.maxConcurrentCalls))
  const [outbound, setOutbound] = useState(String(env.maxConcurrentOutboundCalls))
  const { error, status, submit } = useEnvironmentSave(env, props.onSaved)
  const save = submit(() => ({
    maxConcurrentCalls: total.trim() === "" ? null : Number(total),
    maxConcurrentOutboundCalls: Number(outbound)
  }))
  const errors = fieldErrors(error)
  return html`<section class="panel" id="call-limits" aria-labelledby="call-limits-title">
    <h2 id="call-limits-title">Call Limits</h2>
    <p class="hint">Counted across every callgate instance. A call over a limit is refused: 429 for an outbound call, the error fallback for an inbound one.</p>
    <form onSubmit=${save} novalidate>
      <${Field} id="max-concurrent-calls" label="Max Concurrent Calls" field="maxConcurrentCalls" errors=${errors} hint="Inbound and outbound together; empty for no limit.">
        ${(describedBy: string | undefined, invalid: boolean) =>
          html`<input id="max-concurrent-calls" type="number" min="1" step="1" value=${total} aria-describedby=${describedBy}
            aria-invalid=${invalid ? "true" : undefined} onInput=${(e: Event) => setTotal((e.target as HTMLInputElement).value)} />`}
      <//>
      <${Field} id="max-concurrent-outbound-calls" label="Max Concurrent Outbound Calls" field="maxConcurrentOutboundCalls" errors=${errors} hint="1 to 1000.">
        ${(describedBy: string | undefined, invalid: boolean) =>
          html`<input id="max-concurrent-outbound-calls" type="number" min="1" max="1000" step="1" value=${outbound} aria-describedby=${describedBy}
            aria-invalid=${invalid ? "true" : undefined} onInput=${(e: Event) => setOutbound((e.target as HTMLInputElement).value)} />`}
      <//>
      <${ErrorLine} error=${error} fields=${["maxConcurrentCalls", "maxConcurrentOutboundCalls"]} />
      <div class="actions"><button type="submit" class="primary">Save</button></div>
    </form>
    ${status !== null ? html`<p class="notice" role="status">${status}</p>` : null}
  </section>`
}

// ---- Audio Format ----

const CODEC_NAMES: Record<TelnyxStreamCodec, string> = {
  PCMU: "PCMU (G.711 mu-law, 8 kHz)",
  PCMA: "PCMA (G.711 A-law, 8 kHz)",
  "L16;rate=8000": "L16 (16-bit linear, 8 kHz)",
  "L16;rate=16000": "L16 (16-bit linear, 16 kHz wideband)",
  G722: "G.722 (wideband, 16 kHz)"
}

/** One line for the facts list: what Telnyx is asked for and what the agents get. */
export const audioSummary = (env: Environment) =>
  `Telnyx ${env.telnyxStreamCodec}; agents get ${env.agentAudioFormat === "carrier" ? "the carrier's format" : "8 kHz mu-law (transcoded)"}`

/** The environment's telnyxStreamCodec and agentAudioFormat (docs/calls.md, "Audio formats"). */
const AudioFormatSettings = (props: { env: Environment; onSaved: (env: Environment) => void }) => {
  const { env } = props
  const [codec, setCodec] = useState<TelnyxStreamCodec>(env.telnyxStreamCodec)
  const [agentFormat, setAgentFormat] = useState<AgentAudioFormat>(env.agentAudioFormat)
  const { error, status, submit } = useEnvironmentSave(env, props.onSaved)
  const save = submit(() => ({ telnyxStreamCodec: codec, agentAudioFormat: agentFormat }))
  const errors = fieldErrors(error)
  return html`<section class="panel" id="audio-format" aria-labelledby="audio-format-title">
    <h2 id="audio-format-title">Audio Format</h2>
    <p class="hint">Twilio calls are always 8 kHz mu-law; the codec applies to Telnyx calls only.</p>
    <form onSubmit=${save} novalidate>
      <${Field} id="telnyx-stream-codec" label="Telnyx Stream Codec" field="telnyxStreamCodec" errors=${errors}
        hint="What callgate asks Telnyx to stream in, both ways. New calls use it.">
        ${(describedBy: string | undefined, invalid: boolean) =>
          html`<select id="telnyx-stream-codec" value=${codec} aria-describedby=${describedBy} aria-invalid=${invalid ? "true" : undefined}
            onChange=${(e: Event) => setCodec((e.target as HTMLSelectElement).value as TelnyxStreamCodec)}>
            ${(Object.keys(CODEC_NAMES) as Array<TelnyxStreamCodec>).map((value) => html`<option value=${value}>${CODEC_NAMES[value]}</option>`)}
          </select>`}
      <//>
      <${Field} id="agent-audio-format" label="Agent Audio Format" field="agentAudioFormat" errors=${errors}
        hint="For bots that speak only mu-law: callgate transcodes the carrier's audio both ways.">
        ${(describedBy: string | undefined, invalid: boolean) =>
          html`<select id="agent-audio-format" value=${agentFormat} aria-describedby=${describedBy} aria-invalid=${invalid ? "true" : undefined}
            onChange=${(e: Event) => setAgentFormat((e.target as HTMLSelectElement).value as AgentAudioFormat)}>
            <option value="carrier">The carrier's format (default)</option>
            <option value="audio/x-mulaw;rate=8000">8 kHz mu-law, transcoded</option>
          </select>`}
      <//>
      <${ErrorLine} error=${error} fields=${["telnyxStreamCodec", "agentAudioFormat"]} />
      <div class="actions"><button type="submit" class="primary">Save</button></div>
    </form>
    ${status !== null ? html`<p class="notice" role="status">${status}</p>` : null}
  </section>`
}

// ---- Recording ----

/** The environment's `recording` field: every call recorded, or none (docs/recording.md). */
const RecordingSetting = (props: { env: Environment; onSaved: (env: Environment) => void }) => {
  const { env, onSaved } = props
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<unknown>(null)
  const change = async (event: Event) => {
    const recording = (event.currentTarget as HTMLSelectElement).value
    setBusy(true)
    setError(null)
    try {
      onSaved(await api.updateEnvironment(env.agentId, env.id, { recording }))
    } catch (failure) {
      setError(failure)
    } finally {
      setBusy(false)
    }
  }
  return html`<label>
      <span class="sr-only">Recording</span>
      <select name="recording" value=${env.recording} disabled=${busy} onChange=${change}>
        <option value="off">Off</option>
        <option value="on">On: record every call</option>
      </select>
    </label>
    <${ErrorLine} error=${error} />`
}

// ---- Webhook Settings ----

const WebhookSettings = (props: { env: Environment; onSaved: (env: Environment) => void }) => {
  const { env } = props
  const [url, setUrl] = useState(env.webhookUrl ?? "")
  const [scheme, setScheme] = useState<WebhookSignatureScheme>(env.webhookSignatureScheme)
  const { error, setError, status, setStatus, submit } = useEnvironmentSave(env, props.onSaved)
  const [secret, setSecret] = useState<string | null>(null)
  const [confirm, setConfirm] = useState<"regenerate" | "remove" | null>(null)

  const save = submit(
    () => ({ webhookUrl: url.trim(), webhookSignatureScheme: scheme }),
    (next) => {
      if (next.webhookSecret !== undefined) setSecret(next.webhookSecret)
    }
  )
  const regenerate = async () => {
    setConfirm(null)
    setError(null)
    try {
      const { webhookSecret } = await api.regenerateWebhookSecret(env.agentId, env.id)
      setSecret(webhookSecret)
      setStatus("A new secret was generated; the old one no longer signs requests.")
      props.onSaved(await api.environment(env.agentId, env.id))
    } catch (failure) {
      setError(failure)
    }
  }
  const remove = async () => {
    setConfirm(null)
    setError(null)
    try {
      const next = await api.updateEnvironment(env.agentId, env.id, { webhookUrl: null, webhookSecret: null })
      setSecret(null)
      setUrl("")
      setStatus("The webhook was removed: no session.ended events will be sent.")
      props.onSaved(next)
    } catch (failure) {
      setError(failure)
    }
  }
  const errors = fieldErrors(error)
  return html`<section class="panel" id="webhook-settings" aria-labelledby="webhook-settings-title">
    <h2 id="webhook-settings-title">Webhook Settings</h2>
    <p class="hint">callgate sends a signed <code>session.ended</code> event to this HTTPS URL when each call ends.</p>
    <form onSubmit=${save} novalidate>
      <${Field} id="webhook-url" label="Webhook URL" field="webhookUrl" errors=${errors} hint="https:// only; reachable from callgate.">
        ${(describedBy: string | undefined, invalid: boolean) =>
          html`<input id="webhook-url" type="url" inputmode="url" placeholder="https://example.com/callgate-events" value=${url}
            aria-describedby=${describedBy} aria-invalid=${invalid ? "true" : undefined}
            onInput=${(e: Event) => setUrl((e.target as HTMLInputElement).value)} />`}
      <//>
      <${Field} id="webhook-scheme" label="Signature scheme" field="webhookSignatureScheme" errors=${errors}
        hint="Standard Webhooks: webhook-id, webhook-timestamp and webhook-signature, for receivers that verify with its libraries.">
        ${(describedBy: string | undefined, invalid: boolean) =>
          html`<select id="webhook-scheme" value=${scheme} aria-describedby=${describedBy} aria-invalid=${invalid ? "true" : undefined}
            onChange=${(e: Event) => setScheme((e.target as HTMLSelectElement).value as WebhookSignatureScheme)}>
            <option value="service">X-Service-Signature (default)</option>
            <option value="standard">Standard Webhooks</option>
            <option value="both">Both</option>
          </select>`}
      <//>
      <${ErrorLine} error=${error} fields=${["webhookUrl", "webhookSignatureScheme"]} />
      <div class="actions">
        <button type="submit" class="primary">Save</button>
        ${env.webhookSecretLast4 !== null ? html`<button type="button" onClick=${() => setConfirm("regenerate")}>Regenerate secret</button>` : null}
        ${env.webhookUrl !== null ? html`<button type="button" class="danger" onClick=${() => setConfirm("remove")}>Remove webhook</button>` : null}
      </div>
    </form>
    ${status !== null ? html`<p class="notice" role="status">${status}</p>` : null}
    ${secret !== null
      ? html`<${SecretOnce} label="Webhook signing secret" secret=${secret} testId="webhook-secret" />`
      : env.webhookSecretLast4 !== null
        ? html`<p data-testid="webhook-secret-last4">Signing secret: ends in <code>…${env.webhookSecretLast4}</code> (shown in full only when generated).</p>`
        : null}
    <${Confirm}
      open=${confirm === "regenerate"}
      title="Regenerate webhook secret"
      message="A new secret replaces the current one at once: your receiver must use the new one from now on."
      confirmLabel="Regenerate"
      onConfirm=${regenerate}
      onCancel=${() => setConfirm(null)}
    />
    <${Confirm}
      open=${confirm === "remove"}
      title="Remove webhook"
      message="The webhook URL and its secret are cleared; no more session.ended events are sent."
      confirmLabel="Remove webhook"
      onConfirm=${remove}
      onCancel=${() => setConfirm(null)}
    />
  </section>`
}

// ---- Failover: the Error Fallback Settings dialog ----

const VALUE_PLACEHOLDER: Record<FallbackType, string> = {
  disabled: "Choose a type first",
  phone: "Phone number in E.164 format, e.g. +14155550100",
  webhook: "HTTPS URL, e.g. https://example.com/fallback"
}

/** A number when the text is one, else the text itself, so the API names the field that is wrong. */
const numberOrText = (text: string): number | string => (text.trim() !== "" && Number.isFinite(Number(text)) ? Number(text) : text)

const FallbackForm = (props: { env: Environment; onSaved: (env: Environment) => void; onClose: () => void }) => {
  const { env } = props
  const [type, setType] = useState<FallbackType>(env.errorFallbackType)
  const [value, setValue] = useState(env.errorFallbackValue ?? "")
  const [timeout, setTimeoutValue] = useState(String(env.errorFallbackTimeout))
  const [threshold, setThreshold] = useState(String(env.errorFallbackOccurrenceThreshold))
  const [windowSeconds, setWindowSeconds] = useState(String(env.errorFallbackTimeWindow))
  const [shed, setShed] = useState(env.errorFallbackShedNewCalls)
  const [failedMessage, setFailedMessage] = useState(env.transferFailedMessage ?? "")
  const [failoverTimeout, setFailoverTimeout] = useState(String(env.agentFailoverTimeout))
  const { error, setError, status, setStatus, submit } = useEnvironmentSave(env, props.onSaved)
  const [confirmRegenerate, setConfirmRegenerate] = useState(false)

  const save = submit(() => ({
    errorFallbackType: type,
    errorFallbackValue: type === "disabled" ? null : value.trim(),
    errorFallbackTimeout: numberOrText(timeout),
    errorFallbackOccurrenceThreshold: numberOrText(threshold),
    errorFallbackTimeWindow: numberOrText(windowSeconds),
    errorFallbackShedNewCalls: shed,
    transferFailedMessage: failedMessage.trim() === "" ? null : failedMessage.trim(),
    agentFailoverTimeout: numberOrText(failoverTimeout)
  }))
  const regenerate = async () => {
    setConfirmRegenerate(false)
    setError(null)
    try {
      await api.regenerateFallbackSecret(env.agentId, env.id)
      setStatus("A new error fallback webhook secret was generated; requests signed with the old one fail verification.")
      props.onSaved(await api.environment(env.agentId, env.id))
    } catch (failure) {
      setError(failure)
    }
  }
  const errors = fieldErrors(error)
  const fields = [
    "errorFallbackType",
    "errorFallbackValue",
    "errorFallbackTimeout",
    "errorFallbackOccurrenceThreshold",
    "errorFallbackTimeWindow",
    "errorFallbackShedNewCalls",
    "transferFailedMessage",
    "agentFailoverTimeout"
  ]
  const input = (id: string, current: string, set: (text: string) => void, min: number, max: number) =>
    (describedBy: string | undefined, invalid: boolean) =>
      html`<input id=${id} type="number" inputmode="numeric" min=${min} max=${max} step="1" value=${current}
        aria-describedby=${describedBy} aria-invalid=${invalid ? "true" : undefined}
        onInput=${(e: Event) => set((e.target as HTMLInputElement).value)} />`

  return html`<form onSubmit=${save} novalidate class="fallback-form">
    <${Field} id="fallback-type" label="Error Fallback Type" field="errorFallbackType" errors=${errors}>
      ${(describedBy: string | undefined, invalid: boolean) =>
        html`<select id="fallback-type" value=${type} aria-describedby=${describedBy} aria-invalid=${invalid ? "true" : undefined}
          onChange=${(e: Event) => setType((e.target as HTMLSelectElement).value as FallbackType)}>
          <option value="disabled">Disabled</option>
          <option value="phone">Phone</option>
          <option value="webhook">Webhook</option>
        </select>`}
    <//>
    <${Field} id="fallback-value" label="Error Fallback Value" field="errorFallbackValue" errors=${errors}
      hint=${type === "phone" ? "The caller is transferred to this number." : type === "webhook" ? "callgate POSTs the error here and applies the TwiML it answers." : "Editable once a type is selected."}>
      ${(describedBy: string | undefined, invalid: boolean) =>
        html`<input id="fallback-value" type="text" value=${type === "disabled" ? "" : value} disabled=${type === "disabled"}
          placeholder=${VALUE_PLACEHOLDER[type]} aria-describedby=${describedBy} aria-invalid=${invalid ? "true" : undefined}
          onInput=${(e: Event) => setValue((e.target as HTMLInputElement).value)} />`}
    <//>
    <${Field} id="fallback-timeout" label="Error Fallback Timeout" field="errorFallbackTimeout" errors=${errors}
      hint="Seconds (0 to 30) the agent has to begin answering after the caller speaks. 0 turns the no-response trigger off.">
      ${input("fallback-timeout", timeout, setTimeoutValue, 0, 30)}
    <//>
    <${Field} id="fallback-threshold" label="Error Fallback Occurrence Threshold" field="errorFallbackOccurrenceThreshold" errors=${errors}
      hint="Timeouts (1 to 20), across distinct sessions within the window, that trigger the fallback.">
      ${input("fallback-threshold", threshold, setThreshold, 1, 20)}
    <//>
    <${Field} id="fallback-window" label="Error Fallback Time Window" field="errorFallbackTimeWindow" errors=${errors}
      hint="Seconds (60 to 3600) over which occurrences are counted.">
      ${input("fallback-window", windowSeconds, setWindowSeconds, 60, 3600)}
    <//>
    <${Field} id="agent-failover-timeout" label="Agent Failover Timeout" field="agentFailoverTimeout" errors=${errors}
      hint="Seconds (0 to 30, default 5) a call whose agent dropped waits for another agent of this environment before the error fallback runs. 0 runs the fallback at once.">
      ${input("agent-failover-timeout", failoverTimeout, setFailoverTimeout, 0, 30)}
    <//>
    <${Field} id="fallback-shed" label="Shed new calls while the breaker is open" field="errorFallbackShedNewCalls" errors=${errors}
      hint="While tripped, new callers get the error fallback at once (one probe call per interval still goes to an agent).">
      ${(describedBy: string | undefined, invalid: boolean) =>
        html`<input id="fallback-shed" type="checkbox" checked=${shed} aria-describedby=${describedBy} aria-invalid=${invalid ? "true" : undefined}
          onChange=${(e: Event) => setShed((e.target as HTMLInputElement).checked)} />`}
    <//>
    <${Field} id="fallback-transfer-failed-message" label="Transfer Failed Message" field="transferFailedMessage" errors=${errors}
      hint="Spoken to the caller when the Phone transfer is busy, not answered or fails, before the hang-up. Empty: hang up at once.">
      ${(describedBy: string | undefined, invalid: boolean) =>
        html`<input id="fallback-transfer-failed-message" type="text" maxlength="1000" value=${failedMessage}
          aria-describedby=${describedBy} aria-invalid=${invalid ? "true" : undefined}
          onInput=${(e: Event) => setFailedMessage((e.target as HTMLInputElement).value)} />`}
    <//>
    <${ErrorLine} error=${error} fields=${fields} />
    ${env.errorFallbackType === "webhook" && env.errorFallbackWebhookSecret !== null
      ? html`<div class="secret" data-testid="fallback-webhook-secret">
          <p><strong>Error fallback webhook secret</strong> (<code>errorFallbackWebhookSecret</code>)</p>
          <p><code class="secret-value">${env.errorFallbackWebhookSecret}</code></p>
          ${confirmRegenerate
            ? html`<p>Requests signed with the current secret will fail verification at once.</p>
                <div class="actions">
                  <button type="button" class="danger" onClick=${regenerate}>Regenerate now</button>
                  <button type="button" onClick=${() => setConfirmRegenerate(false)}>Keep current secret</button>
                </div>`
            : html`<button type="button" onClick=${() => setConfirmRegenerate(true)}>Regenerate secret</button>`}
        </div>`
      : null}
    ${status !== null ? html`<p class="notice" role="status">${status}</p>` : null}
    <div class="actions">
      <button type="submit" class="primary">Save</button>
      <button type="button" onClick=${props.onClose}>Close</button>
    </div>
  </form>`
}

// ---- The breaker, the charts, the counts ----

const BreakerCard = (props: { breaker: BreakerState | null; agentId: string }) => {
  const b = props.breaker
  if (b === null) return html`<div class="card"><h3>No-response breaker</h3><p>Loading…</p></div>`
  return html`<div class="card" data-testid="breaker">
    <h3>No-response breaker</h3>
    <p>State: <strong data-testid="breaker-state" class=${`breaker-${b.state}`}>${b.state}</strong>${b.state !== "closed"
      ? b.shedNewCalls
        ? " (new calls get the error fallback at the entry; one probe call per interval goes to an agent)"
        : " (shedding is off: new calls still go to an agent)"
      : ""}</p>
    ${b.noResponseTrigger === "off"
      ? html`<p>Off: Error Fallback Timeout is 0.</p>`
      : html`<p class="big"><span data-testid="breaker-occurrences">${b.occurrences}</span> / ${b.threshold}</p>
          <p class="hint">occurrences in the last ${b.windowSeconds} s (timeout ${b.timeoutSeconds} s)</p>`}
    <p data-testid="breaker-last-trip">
      Last trip:
      ${b.lastTrip === null
        ? " never"
        : html` ${time(b.lastTrip.at)} (${b.lastTrip.count}/${b.lastTrip.threshold}, session${" "}<a class="mono" href=${href("agents", props.agentId, "sessions", b.lastTrip.sessionId)}>${b.lastTrip.sessionId}</a>)`}
    </p>
  </div>`
}

const CountsCard = (props: { sessions: ReadonlyArray<Session> }) => {
  const c = sessionCounts(props.sessions)
  return html`<div class="card" data-testid="session-counts">
    <h3>Sessions, last hour</h3>
    <dl class="counts">
      <div><dt>Completed</dt><dd data-testid="count-completed">${c.completed}</dd></div>
      <div><dt>Failed</dt><dd data-testid="count-failed">${c.failed}</dd></div>
      <div><dt>Rescued</dt><dd data-testid="count-rescued">${c.rescued}</dd></div>
      <div><dt>Rescue failed</dt><dd data-testid="count-rescue-failed">${c.rescueFailed}</dd></div>
      <div><dt>Timed out</dt><dd>${c.timeout}</dd></div>
      <div><dt>Active</dt><dd data-testid="count-active">${c.active}</dd></div>
    </dl>
  </div>`
}

const LatencyCharts = (props: { sessions: ReadonlyArray<Session> }) => {
  const latencies = useMemo(() => answeredTurns(props.sessions), [props.sessions])
  const minute = useMemo(() => perMinutePercentiles(latencies, Date.now()), [latencies])
  const bins = useMemo(() => histogram(latencies.map((l) => l.latencyMs)), [latencies])
  const lineOptions = useMemo<Omit<uPlot.Options, "width" | "height">>(
    () => ({
      scales: { y: { range: (_u, _min, max) => [0, Math.max(max ?? 0, 100) * 1.15] } },
      axes: [{}, { label: "ms" }],
      series: [
        {},
        { label: "p50", stroke: "#2563eb", width: 2, spanGaps: false, points: { show: true, size: 7, fill: "#2563eb" } },
        { label: "p95", stroke: "#ea580c", width: 2, spanGaps: false, points: { show: true, size: 7, fill: "#ea580c" } }
      ]
    }),
    []
  )
  const histogramOptions = useMemo<Omit<uPlot.Options, "width" | "height">>(
    () => ({
      scales: {
        x: { time: false, range: (_u, min, max) => [min - bins.binMs / 2, max + bins.binMs / 2] },
        y: { range: (_u, _min, max) => [0, Math.max(max, 1) * 1.2] }
      },
      axes: [{ label: "latency (ms)" }, { label: "turns" }],
      series: [{ label: "bin centre (ms)" }, { label: "turns", stroke: "#0f766e", fill: "rgba(15,118,110,0.35)", paths: barsPath, points: { show: false } }]
    }),
    [bins.binMs]
  )
  const lineData = useMemo(() => [minute.minutes, minute.p50, minute.p95] as uPlot.AlignedData, [minute])
  const histogramData = useMemo(() => [bins.edges.map((edge) => edge + bins.binMs / 2), bins.counts] as uPlot.AlignedData, [bins])
  return html`<div class="charts">
    <div class="card wide">
      <h3>Agent response latency per minute (p50, p95), last hour</h3>
      <p class="hint" data-testid="latency-summary">${latencies.length} answered turns</p>
      <${Chart} options=${lineOptions} data=${lineData} label="p50 and p95 agent response latency per minute over the last hour" />
    </div>
    <div class="card wide">
      <h3>Latency histogram, last hour</h3>
      ${bins.counts.length === 0
        ? html`<p>No answered turns yet.</p>`
        : html`<${Chart} options=${histogramOptions} data=${histogramData} label=${`Histogram of agent response latency, ${bins.binMs} ms bins`} />`}
    </div>
  </div>`
}

// ---- The environment page ----

export const EnvironmentPage = (props: { agentId: string; environmentId: string }) => {
  const { agentId, environmentId } = props
  const [env, setEnv] = useState<Environment | null>(null)
  const [breaker, setBreaker] = useState<BreakerState | null>(null)
  const [sessions, setSessions] = useState<ReadonlyArray<Session>>([])
  const [deliveries, setDeliveries] = useState<ReadonlyArray<Delivery>>([])
  const [error, setError] = useState<unknown>(null)
  const [showWebhook, setShowWebhook] = useState(false)
  const [showFailover, setShowFailover] = useState(false)
  const [showLimits, setShowLimits] = useState(false)
  const [showAudio, setShowAudio] = useState(false)
  const [busy, setBusy] = useState<string | null>(null)
  const [redelivered, setRedelivered] = useState<string | null>(null)

  usePoll(
    async (signal) => {
      try {
        const [e, b, s, d] = await Promise.all([
          api.environment(agentId, environmentId),
          api.breaker(agentId, environmentId),
          recentSessions(agentId, environmentId),
          api.deliveries(agentId, environmentId, 50)
        ])
        if (signal.cancelled) return
        setEnv(e)
        setBreaker(b)
        setSessions(s)
        setDeliveries(d.deliveries)
        setError(null)
      } catch (failure) {
        if (signal.cancelled) return
        setError(failure)
        // An environment that does not exist will not appear by asking again: the view says so and stops polling.
        if (failure instanceof ApiFailure && failure.status === 404) signal.cancelled = true
      }
    },
    2000,
    [agentId, environmentId]
  )

  const closeFailover = useCallback(() => setShowFailover(false), [])
  const redeliver = async (delivery: Delivery) => {
    setBusy(delivery.id)
    setRedelivered(null)
    try {
      const next = await api.redeliver(agentId, environmentId, delivery.id)
      setDeliveries((all) => all.map((d) => (d.id === next.id ? next : d)))
      setRedelivered(`Delivery ${next.id} was queued again.`)
    } catch (failure) {
      setError(failure)
    } finally {
      setBusy(null)
    }
  }

  const crumbs = html`<nav class="crumbs" aria-label="Breadcrumb">
    <a href="#/agents">Agents</a><span aria-hidden="true"> / </span>
    <a href=${href("agents", agentId)}>${agentId}</a><span aria-hidden="true"> / </span>
    <a href=${href("agents", agentId, "environments")}>Environments</a><span aria-hidden="true"> / </span>
    <span aria-current="page">${env?.name ?? environmentId}</span>
  </nav>`
  // An id that names no environment (a stale link, a typo) says so instead of loading for ever.
  if (env === null && error instanceof ApiFailure && error.status === 404) {
    return html`<section>
      ${crumbs}
      <h1>Environment not found</h1>
      <p class="error" role="alert" data-testid="environment-not-found">
        Agent <span class="mono">${agentId}</span> has no environment <span class="mono">${environmentId}</span>: ${error.message}
      </p>
      <p><a href=${href("agents", agentId, "environments")}>The agent's environments</a></p>
    </section>`
  }

  return html`<section>
    ${crumbs}
    <h1 data-testid="environment-name">${env?.name ?? "…"}</h1>
    <p class="muted mono">${environmentId}</p>
    <${ErrorLine} error=${error} />
    ${env === null
      ? null
      : html`<div class="toolbar">
            <button type="button" aria-expanded=${showWebhook} aria-controls="webhook-settings" onClick=${() => setShowWebhook(!showWebhook)}>Webhook Settings</button>
            <button type="button" aria-haspopup="dialog" onClick=${() => setShowFailover(true)}>Failover</button>
            <button type="button" aria-expanded=${showLimits} aria-controls="call-limits" onClick=${() => setShowLimits(!showLimits)}>Call Limits</button>
            <button type="button" aria-expanded=${showAudio} aria-controls="audio-format" onClick=${() => setShowAudio(!showAudio)}>Audio Format</button>
          </div>
          <dl class="facts">
            <dt>Webhook</dt><dd>${env.webhookUrl ?? "none"}</dd>
            <dt>Error fallback</dt>
            <dd data-testid="fallback-summary">${env.errorFallbackType}${env.errorFallbackValue !== null ? ` → ${env.errorFallbackValue}` : ""}; timeout ${env.errorFallbackTimeout} s, threshold ${env.errorFallbackOccurrenceThreshold}, window ${env.errorFallbackTimeWindow} s; agent failover ${env.agentFailoverTimeout > 0 ? `within ${env.agentFailoverTimeout} s` : "off"}</dd>
            <dt>Call limits</dt>
            <dd data-testid="limits-summary">${env.maxConcurrentCalls === null ? "no limit" : `${env.maxConcurrentCalls} calls`}; ${env.maxConcurrentOutboundCalls} outbound</dd>
            <dt>Audio</dt>
            <dd data-testid="audio-summary">${audioSummary(env)}</dd>
            <dt>Recording</dt>
            <dd><${RecordingSetting} env=${env} onSaved=${setEnv} /></dd>
          </dl>
          ${showLimits ? html`<${CallLimits} env=${env} onSaved=${setEnv} />` : null}
          ${showAudio ? html`<${AudioFormatSettings} env=${env} onSaved=${setEnv} />` : null}
          ${showWebhook ? html`<${WebhookSettings} env=${env} onSaved=${setEnv} />` : null}
          <${Dialog} title="Error Fallback Settings" open=${showFailover} onClose=${closeFailover}>
            <${FallbackForm} env=${env} onSaved=${setEnv} onClose=${closeFailover} />
          <//>`}
    <div class="cards">
      <${BreakerCard} breaker=${breaker} agentId=${agentId} />
      <${CountsCard} sessions=${sessions} />
    </div>
    <${LatencyCharts} sessions=${sessions} />
    <h2>Sessions</h2>
    <p class="hint">Updated every 2 seconds.</p>
    ${sessions.length === 0 ? html`<p>No sessions in the last hour.</p>` : html`<${SessionTable} sessions=${sessions} agentId=${agentId} />`}
    <h2>Webhook deliveries</h2>
    ${redelivered !== null ? html`<p class="notice" role="status">${redelivered}</p>` : null}
    ${deliveries.length === 0 ? html`<p>No deliveries yet.</p>` : html`<${DeliveryTable} deliveries=${deliveries} onRedeliver=${redeliver} busy=${busy} />`}
  </section>`
}
