import { html } from "htm/preact"
import { useEffect, useMemo, useRef, useState } from "preact/hooks"
import type uPlot from "uplot"
import { type AgentLeg, type AgentList, api, type Delivery, type Environment, fetchRecording, type Session, session as keyStore } from "./api.js"
import { barsPath, Chart, Confirm, ErrorLine, href, ms, SecretOnce, time, usePoll } from "./components.js"

// ---- Sign-in ----

export const SignIn = (props: { notice: string | null; onSignedIn: () => void }) => {
  const [key, setKey] = useState("")
  const [error, setError] = useState<unknown>(null)
  const [busy, setBusy] = useState(false)
  const submit = async (event: Event) => {
    event.preventDefault()
    setBusy(true)
    setError(null)
    try {
      // Checked against the API before it is kept.
      await api.agents(key.trim())
      keyStore.signIn(key.trim())
      setKey("")
      props.onSignedIn()
    } catch (failure) {
      setError(failure)
    } finally {
      setBusy(false)
    }
  }
  return html`<main class="signin">
    <h1>callgate</h1>
    <form onSubmit=${submit} novalidate>
      <div class="field">
        <label for="api-key">API key</label>
        <input id="api-key" type="password" autocomplete="off" spellcheck="false" value=${key} onInput=${(e: Event) => setKey((e.target as HTMLInputElement).value)} required />
        <p class="hint">The admin key sees every agent; a scoped key only its own. The key stays in this browser tab until you sign out.</p>
      </div>
      ${props.notice !== null ? html`<p class="notice">${props.notice}</p>` : null}
      <${ErrorLine} error=${error} />
      <button type="submit" class="primary" disabled=${busy || key.trim() === ""}>Sign in</button>
    </form>
  </main>`
}

const Breadcrumbs = (props: { items: Array<{ label: string; href?: string }> }) =>
  html`<nav class="crumbs" aria-label="Breadcrumb">
    ${props.items.map((item, i) =>
      html`${i > 0 ? html`<span aria-hidden="true"> / </span>` : null}${item.href !== undefined ? html`<a href=${item.href}>${item.label}</a>` : html`<span aria-current="page">${item.label}</span>`}`
    )}
  </nav>`

// ---- Agents ----

export const AgentsPage = () => {
  const [list, setList] = useState<AgentList | null>(null)
  const [error, setError] = useState<unknown>(null)
  const [open, setOpen] = useState("")
  usePoll(
    async (signal) => {
      try {
        const next = await api.agents()
        if (!signal.cancelled) {
          setList(next)
          setError(null)
        }
      } catch (failure) {
        if (!signal.cancelled) setError(failure)
      }
    },
    10_000,
    []
  )
  const rows = useMemo(() => {
    if (list === null) return []
    if (list.scope.kind === "admin") return list.agents
    // A scoped key's agents, with or without environments yet.
    return list.scope.agentIds.map((agentId) => list.agents.find((agent) => agent.agentId === agentId) ?? { agentId, environments: 0 })
  }, [list])
  return html`<section>
    <${Breadcrumbs} items=${[{ label: "Agents" }]} />
    <h1>Agents</h1>
    ${list?.scope.kind === "scoped"
      ? html`<p class="notice" data-testid="scope-notice">This key is scoped: it sees only the agents listed here.</p>`
      : null}
    <${ErrorLine} error=${error} />
    ${list === null && error === null ? html`<p>Loading…</p>` : null}
    ${list !== null && rows.length === 0 ? html`<p>No agent has an environment yet. Open an agent by its id to create the first one.</p>` : null}
    ${rows.length > 0
      ? html`<div class="table-scroll"><table class="list" data-testid="agents">
          <thead><tr><th scope="col">Agent</th><th scope="col">Environments</th></tr></thead>
          <tbody>
            ${rows.map((agent) => html`<tr key=${agent.agentId}><td><a href=${href("agents", agent.agentId)}>${agent.agentId}</a></td><td>${agent.environments}</td></tr>`)}
          </tbody>
        </table></div>`
      : null}
    ${list?.scope.kind === "admin"
      ? html`<form
          class="inline"
          onSubmit=${(event: Event) => {
            event.preventDefault()
            if (open.trim() !== "") location.hash = href("agents", open.trim())
          }}
        >
          <div class="field">
            <label for="open-agent">Agent ID</label>
            <input id="open-agent" value=${open} onInput=${(e: Event) => setOpen((e.target as HTMLInputElement).value)} />
          </div>
          <button type="submit">Open agent</button>
        </form>`
      : null}
  </section>`
}

// ---- Agent: its environments and recent sessions ----

export const StatusBadge = (props: { status: Session["status"] | Delivery["state"] }) => html`<span class=${`badge ${props.status}`}>${props.status}</span>`

export const SessionTable = (props: { sessions: ReadonlyArray<Session>; agentId: string; showEnvironment?: boolean }) =>
  html`<div class="table-scroll"><table class="list" data-testid="sessions">
    <thead>
      <tr>
        <th scope="col">Session</th>
        ${props.showEnvironment ? html`<th scope="col">Environment</th>` : null}
        <th scope="col">Status</th>
        <th scope="col">Started</th>
        <th scope="col">Caller</th>
        <th scope="col">Turns</th>
        <th scope="col">Latencies</th>
        <th scope="col">Fallback</th>
      </tr>
    </thead>
    <tbody>
      ${props.sessions.map(
        (s) => html`<tr key=${s.id} data-session=${s.id}>
          <td><a href=${href("agents", props.agentId, "sessions", s.id)}>${s.id}</a></td>
          ${props.showEnvironment ? html`<td><a href=${href("agents", props.agentId, "environments", s.environmentId)}>${s.environmentId}</a></td>` : null}
          <td><${StatusBadge} status=${s.status} />${s.endReason !== null ? html` <span class="muted">${s.endReason}</span>` : null}</td>
          <td>${time(s.createdAt)}</td>
          <td>${s.from ?? "—"}</td>
          <td data-testid="turn-count">${s.turns.length}</td>
          <td data-testid="latencies">${s.turns.map((turn) => ms(turn.latencyMs)).join(", ") || "—"}</td>
          <td>${s.fallback !== null ? `${s.fallback.type}: ${s.fallback.outcome}` : "—"}</td>
        </tr>`
      )}
    </tbody>
  </table></div>`

export const AgentPage = (props: { agentId: string; section?: "environments" | undefined }) => {
  const { agentId } = props
  const environmentsHeading = useRef<HTMLHeadingElement>(null)
  // Arriving through the Environments breadcrumb: the list of environments is where the reader goes.
  useEffect(() => {
    if (props.section === "environments") {
      environmentsHeading.current?.scrollIntoView({ block: "start" })
      environmentsHeading.current?.focus()
    }
  }, [props.section])
  const [environments, setEnvironments] = useState<ReadonlyArray<Environment> | null>(null)
  const [sessions, setSessions] = useState<ReadonlyArray<Session>>([])
  const [error, setError] = useState<unknown>(null)
  const [name, setName] = useState("")
  const [createError, setCreateError] = useState<unknown>(null)
  const [deleting, setDeleting] = useState<Environment | null>(null)
  const [created, setCreated] = useState<Environment | null>(null)
  const [refresh, setRefresh] = useState(0)

  usePoll(
    async (signal) => {
      try {
        const [envs, page] = await Promise.all([api.environments(agentId), api.sessions(agentId, { limit: 20 })])
        if (signal.cancelled) return
        setEnvironments(envs)
        setSessions(page.sessions)
        setError(null)
      } catch (failure) {
        if (!signal.cancelled) setError(failure)
      }
    },
    3000,
    [agentId, refresh]
  )

  const create = async (event: Event) => {
    event.preventDefault()
    setCreateError(null)
    try {
      const env = await api.createEnvironment(agentId, name)
      setName("")
      setCreated(env)
      setRefresh((n) => n + 1)
    } catch (failure) {
      setCreateError(failure)
    }
  }
  const clone = async (env: Environment) => {
    try {
      const copy = await api.cloneEnvironment(agentId, env.id)
      setCreated(copy)
      setRefresh((n) => n + 1)
    } catch (failure) {
      setError(failure)
    }
  }
  const remove = async () => {
    const env = deleting
    setDeleting(null)
    if (env === null) return
    try {
      await api.deleteEnvironment(agentId, env.id)
      setRefresh((n) => n + 1)
    } catch (failure) {
      setError(failure)
    }
  }

  return html`<section>
    <${Breadcrumbs} items=${[{ label: "Agents", href: "#/agents" }, { label: agentId }]} />
    <h1>Agent <span class="mono">${agentId}</span></h1>
    <${ErrorLine} error=${error} />
    <h2 id="environments" tabindex="-1" ref=${environmentsHeading}>Environments</h2>
    ${environments !== null && environments.length === 0 ? html`<p>No environments yet.</p>` : null}
    ${environments !== null && environments.length > 0
      ? html`<div class="table-scroll"><table class="list" data-testid="environments">
          <thead><tr><th scope="col">Name</th><th scope="col">ID</th><th scope="col">Webhook</th><th scope="col">Error fallback</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
          <tbody>
            ${environments.map(
              (env) => html`<tr key=${env.id}>
                <td><a href=${href("agents", agentId, "environments", env.id)} data-testid="environment-link">${env.name}</a></td>
                <td class="mono">${env.id}</td>
                <td>${env.webhookUrl ?? "—"}</td>
                <td>${env.errorFallbackType}${env.errorFallbackValue !== null ? ` (${env.errorFallbackValue})` : ""}</td>
                <td class="row-actions">
                  <button type="button" onClick=${() => clone(env)} aria-label=${`Clone ${env.name}`}>Clone</button>
                  <button type="button" class="danger" onClick=${() => setDeleting(env)} aria-label=${`Delete ${env.name}`}>Delete</button>
                </td>
              </tr>`
            )}
          </tbody>
        </table></div>`
      : null}
    ${created?.webhookSecret !== undefined
      ? html`<${SecretOnce} label=${`Webhook secret of ${created.name}`} secret=${created.webhookSecret} testId="created-webhook-secret" />`
      : null}
    <form class="inline" onSubmit=${create} novalidate>
      <div class="field">
        <label for="new-environment">Environment name</label>
        <input id="new-environment" value=${name} onInput=${(e: Event) => setName((e.target as HTMLInputElement).value)} />
      </div>
      <button type="submit" class="primary">Create environment</button>
    </form>
    <${ErrorLine} error=${createError} />
    <h2>Recent sessions</h2>
    ${sessions.length === 0 ? html`<p>No sessions yet.</p>` : html`<${SessionTable} sessions=${sessions} agentId=${agentId} showEnvironment=${true} />`}
    <${Confirm}
      open=${deleting !== null}
      title="Delete environment"
      message=${deleting !== null ? `Delete the environment "${deleting.name}"? Calls to it will be refused, and this cannot be undone.` : ""}
      confirmLabel="Delete"
      onConfirm=${remove}
      onCancel=${() => setDeleting(null)}
    />
  </section>`
}

// ---- Session: turns chart, fallback record, deliveries ----

export const DeliveryTable = (props: { deliveries: ReadonlyArray<Delivery>; onRedeliver: (delivery: Delivery) => void; busy: string | null }) =>
  html`<div class="table-scroll"><table class="list" data-testid="deliveries">
    <thead>
      <tr>
        <th scope="col">Delivery</th>
        <th scope="col">Session</th>
        <th scope="col">Status</th>
        <th scope="col">Attempts</th>
        <th scope="col">Next attempt</th>
        <th scope="col">Last response</th>
        <th scope="col"><span class="sr-only">Actions</span></th>
      </tr>
    </thead>
    <tbody>
      ${props.deliveries.map((d) => {
        const last = d.attempts[d.attempts.length - 1]
        return html`<tr key=${d.id} data-delivery=${d.id}>
          <td class="mono">${d.id}</td>
          <td class="mono">${d.sessionId}</td>
          <td data-testid="delivery-state"><${StatusBadge} status=${d.state} />${d.reason !== null ? html` <span class="muted">${d.reason}</span>` : null}</td>
          <td data-testid="delivery-attempts">${d.attempts.length}</td>
          <td>${time(d.nextAttemptAt)}</td>
          <td data-testid="delivery-code">${last === undefined ? "—" : last.statusCode !== null ? String(last.statusCode) : (last.error ?? "—")}</td>
          <td>
            ${d.state !== "pending"
              ? html`<button type="button" disabled=${props.busy === d.id} onClick=${() => props.onRedeliver(d)}>Redeliver</button>`
              : null}
          </td>
        </tr>`
      })}
    </tbody>
  </table></div>`

/** The call's recording, fetched with the API key and played from memory (docs/recording.md, "Access"). */
const RecordingPlayer = (props: { agentId: string; session: Session }) => {
  const { agentId, session } = props
  const [url, setUrl] = useState<string | null>(null)
  const [error, setError] = useState<unknown>(null)
  const recorded = session.recording !== undefined
  useEffect(() => {
    if (!recorded) return
    let objectUrl: string | null = null
    let cancelled = false
    fetchRecording(agentId, session.id).then(
      (blob) => {
        if (cancelled) return
        objectUrl = URL.createObjectURL(blob)
        setUrl(objectUrl)
      },
      (failure) => {
        if (!cancelled) setError(failure)
      }
    )
    return () => {
      cancelled = true
      if (objectUrl !== null) URL.revokeObjectURL(objectUrl)
    }
  }, [agentId, session.id, recorded])
  if (session.recording === undefined) {
    return html`<p data-testid="recording">${session.status === "active" ? "Not available until the call has ended." : "This call was not recorded."}</p>`
  }
  const { durationMs, pauses } = session.recording
  return html`<div data-testid="recording">
    <${ErrorLine} error=${error} />
    ${url === null ? html`<p>Loading the recording…</p>` : html`<audio controls preload="metadata" src=${url} aria-label="Call recording"></audio>`}
    <p class="hint">
      Two channels: caller left, agent right; ${(durationMs / 1000).toFixed(1)} s.
      ${pauses.length === 0 ? "Not paused." : `Paused: ${pauses.map((p) => `${(p.startMs / 1000).toFixed(1)}–${(p.endMs / 1000).toFixed(1)} s`).join(", ")}.`}
    </p>
  </div>`
}

/** The agents that held the call (docs/reliability.md, "Agent failover"): one row per leg, the failovers counted. */
const AgentLegs = (props: { legs: ReadonlyArray<AgentLeg>; failovers: number }) => {
  const { legs, failovers } = props
  if (legs.length === 0) return html`<p data-testid="agent-failovers">No agent has held this call.</p>`
  return html`<p data-testid="agent-failovers">${failovers === 0 ? "No failover: one agent held the call." : `${failovers} failover${failovers === 1 ? "" : "s"}: the call moved to another agent.`}</p>
    <div class="table-scroll"><table class="list" data-testid="agent-legs">
      <thead><tr><th scope="col">Leg</th><th scope="col">Started</th><th scope="col">Ended</th><th scope="col">End reason</th><th scope="col">Instance</th></tr></thead>
      <tbody>
        ${legs.map(
          (leg, n) => html`<tr key=${n}><td>${n + 1}</td><td>${time(leg.startedAt)}</td><td>${leg.endedAt === null ? "holding the call" : time(leg.endedAt)}</td><td>${leg.endReason ?? "—"}</td><td class="mono">${leg.instanceId}</td></tr>`
        )}
      </tbody>
    </table></div>`
}

export const SessionPage = (props: { agentId: string; sessionId: string }) => {
  const { agentId, sessionId } = props
  const [session, setSession] = useState<Session | null>(null)
  const [env, setEnv] = useState<Environment | null>(null)
  const [deliveries, setDeliveries] = useState<ReadonlyArray<Delivery>>([])
  const [error, setError] = useState<unknown>(null)
  const [busy, setBusy] = useState<string | null>(null)

  usePoll(
    async (signal) => {
      try {
        const s = await api.session(agentId, sessionId)
        const [e, page] = await Promise.all([api.environment(agentId, s.environmentId), api.deliveries(agentId, s.environmentId, 100)])
        if (signal.cancelled) return
        setSession(s)
        setEnv(e)
        setDeliveries(page.deliveries.filter((d) => d.sessionId === sessionId))
        setError(null)
      } catch (failure) {
        if (!signal.cancelled) setError(failure)
      }
    },
    2000,
    [agentId, sessionId]
  )

  const timeoutMs = env !== null && env.errorFallbackTimeout > 0 ? env.errorFallbackTimeout * 1000 : null
  const chartOptions = useMemo<Omit<uPlot.Options, "width" | "height">>(
    () => ({
      scales: {
        x: { time: false, range: (_u, min, max) => [Math.min(min, max) - 0.5, Math.max(min, max) + 0.5] },
        y: { range: (_u, _min, max) => [0, Math.max(max, 100) * 1.15] }
      },
      axes: [{ label: "turn", incrs: [1], values: (_u, splits) => splits.map((split) => (Number.isInteger(split) ? String(split) : "")) }, { label: "ms" }],
      series: [
        { label: "turn" },
        { label: "latency (ms)", stroke: "#2563eb", fill: "rgba(37,99,235,0.35)", paths: barsPath, points: { show: false } },
        { label: "heard (ms)", stroke: "#16a34a", points: { show: true, size: 6 } },
        { label: "timeout (ms)", stroke: "#dc2626", dash: [6, 4], points: { show: false } }
      ]
    }),
    []
  )
  const chartData = useMemo<uPlot.AlignedData>(() => {
    const turns = session?.turns ?? []
    return [turns.map((t) => t.index), turns.map((t) => t.latencyMs), turns.map((t) => t.playedLatencyMs ?? null), turns.map(() => timeoutMs)] as uPlot.AlignedData
  }, [session, timeoutMs])

  const redeliver = async (delivery: Delivery) => {
    setBusy(delivery.id)
    try {
      const next = await api.redeliver(agentId, delivery.environmentId, delivery.id)
      setDeliveries((all) => all.map((d) => (d.id === next.id ? next : d)))
    } catch (failure) {
      setError(failure)
    } finally {
      setBusy(null)
    }
  }

  return html`<section>
    <${Breadcrumbs}
      items=${[
        { label: "Agents", href: "#/agents" },
        { label: agentId, href: href("agents", agentId) },
        ...(session !== null ? [{ label: env?.name ?? session.environmentId, href: href("agents", agentId, "environments", session.environmentId) }] : []),
        { label: sessionId }
      ]}
    />
    <h1>Session <span class="mono">${sessionId}</span></h1>
    <${ErrorLine} error=${error} />
    ${session === null
      ? html`<p>Loading…</p>`
      : html`<dl class="facts">
            <dt>Status</dt><dd><${StatusBadge} status=${session.status} /></dd>
            <dt>End reason</dt><dd>${session.endReason ?? "—"}</dd>
            <dt>Carrier</dt><dd>${session.provider} (${session.direction})</dd>
            <dt>Call id</dt><dd class="mono">${session.callId}</dd>
            <dt>From</dt><dd>${session.from ?? "—"}</dd>
            <dt>To</dt><dd>${session.to ?? "—"}</dd>
            <dt>Started</dt><dd>${time(session.createdAt)}</dd>
            <dt>Ended</dt><dd>${time(session.endedAt)}</dd>
          </dl>
          ${session.agentLegs !== undefined ? html`<h2>Agent legs</h2><${AgentLegs} legs=${session.agentLegs} failovers=${session.agentFailovers ?? 0} />` : null}
          <h2>Recording</h2>
          <${RecordingPlayer} agentId=${agentId} session=${session} />
          <h2>Turns</h2>
          ${session.turns.length === 0
            ? html`<p>No caller turn yet.</p>`
            : html`<${Chart}
                  options=${chartOptions}
                  data=${chartData}
                  label=${`Agent response latency per turn (bars: first voiced frame; dots: heard by the caller)${timeoutMs !== null ? `, timeout ${timeoutMs} ms` : ""}`}
                />
                <div class="table-scroll"><table class="list" data-testid="turns">
                  <thead><tr><th scope="col">Turn</th><th scope="col">Input</th><th scope="col">Caller ended</th><th scope="col">Agent answered</th><th scope="col">Latency</th><th scope="col">Heard after</th><th scope="col">Timeouts</th></tr></thead>
                  <tbody>
                    ${session.turns.map(
                      (t) => html`<tr key=${t.index}><td>${t.index}</td><td>${t.input}</td><td>${time(t.callerEndedAt)}</td><td>${time(t.agentRespondedAt)}</td><td>${ms(t.latencyMs)}</td><td>${ms(t.playedLatencyMs ?? null)}</td><td>${t.timeoutOccurrences}</td></tr>`
                    )}
                  </tbody>
                </table></div>`}
          <h2>Error fallback</h2>
          ${session.fallback === null
            ? html`<p>The error fallback did not run.</p>`
            : html`<dl class="facts" data-testid="fallback">
                <dt>Trigger</dt><dd>${session.fallback.trigger}</dd>
                <dt>Error</dt><dd>${session.fallback.errorMessage}</dd>
                <dt>Type</dt><dd>${session.fallback.type}</dd>
                <dt>Outcome</dt><dd>${session.fallback.outcome}</dd>
                <dt>Started</dt><dd>${time(session.fallback.startedAt)}</dd>
                <dt>Carrier request</dt><dd>${time(session.fallback.carrierRequestAt)}</dd>
                <dt>Finished</dt><dd>${time(session.fallback.finishedAt)}</dd>
                <dt>Webhook status</dt><dd>${session.fallback.webhookStatus ?? "—"}</dd>
                <dt>Detail</dt><dd>${session.fallback.detail ?? "—"}</dd>
              </dl>`}
          <h2>Transfers</h2>
          ${(session.transfers ?? []).length === 0 && session.pendingTransfer === undefined
            ? html`<p>The call was not transferred.</p>`
            : html`<div class="table-scroll"><table class="list" data-testid="transfers">
                <thead><tr><th scope="col">To</th><th scope="col">By</th><th scope="col">Outcome</th><th scope="col">Rang</th><th scope="col">Talked</th><th scope="col">Carrier said</th><th scope="col">Message spoken</th></tr></thead>
                <tbody>
                  ${(session.transfers ?? []).map(
                    (t, i) => html`<tr key=${i}><td>${t.to}</td><td>${t.initiatedBy}</td><td>${t.status}</td><td>${ms(t.ringMs)}</td><td>${ms(t.talkMs)}</td><td>${t.carrierStatus ?? "— (no outcome came: closed by callgate)"}</td><td>${t.transferFailedMessage ? "yes" : "no"}</td></tr>`
                  )}
                  ${session.pendingTransfer !== undefined
                    ? html`<tr key="pending"><td>${session.pendingTransfer.to}</td><td>${session.pendingTransfer.initiatedBy}</td><td>${session.pendingTransfer.answeredAt === null ? "ringing" : "talking"}</td><td>—</td><td>—</td><td>—</td><td>—</td></tr>`
                    : null}
                </tbody>
              </table></div>`}
          <h2>session.ended deliveries</h2>
          ${deliveries.length === 0
            ? html`<p>None${env?.webhookUrl === null ? ": the environment has no webhook" : ""}.</p>`
            : html`<${DeliveryTable} deliveries=${deliveries} onRedeliver=${redeliver} busy=${busy} />`}`}
  </section>`
}

