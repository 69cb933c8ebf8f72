import { html } from "htm/preact"
import { render } from "preact"
import { useEffect, useState } from "preact/hooks"
import "uplot/dist/uPlot.min.css"
import "./style.css"
import { api, type AgentList, session, setUnauthorizedHandler } from "./api.js"
import { EnvironmentPage } from "./environment.js"
import { AgentPage, AgentsPage, SessionPage, SignIn } from "./pages.js"

/** Routes live in the fragment (#/agents/...): ids only, never the key. */
type Route =
  | { page: "agents" }
  | { page: "agent"; agentId: string; section?: "environments" }
  | { page: "environment"; agentId: string; environmentId: string }
  | { page: "session"; agentId: string; sessionId: string }

const parseRoute = (hash: string): Route => {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent)
  if (parts[0] === "agents" && parts[1] !== undefined) {
    if (parts[2] === "environments" && parts[3] !== undefined) return { page: "environment", agentId: parts[1], environmentId: parts[3] }
    if (parts[2] === "sessions" && parts[3] !== undefined) return { page: "session", agentId: parts[1], sessionId: parts[3] }
    // The Environments breadcrumb: the agent's page, at its list of environments.
    if (parts[2] === "environments") return { page: "agent", agentId: parts[1], section: "environments" }
    return { page: "agent", agentId: parts[1] }
  }
  return { page: "agents" }
}

const App = () => {
  const [signedIn, setSignedIn] = useState(session.key() !== null)
  const [notice, setNotice] = useState<string | null>(null)
  const [route, setRoute] = useState(parseRoute(location.hash))
  const [scope, setScope] = useState<AgentList["scope"] | null>(null)

  useEffect(() => {
    const onHash = () => setRoute(parseRoute(location.hash))
    window.addEventListener("hashchange", onHash)
    setUnauthorizedHandler(() => {
      session.signOut()
      setSignedIn(false)
      setNotice("The API key is no longer accepted: sign in again.")
    })
    return () => window.removeEventListener("hashchange", onHash)
  }, [])

  useEffect(() => {
    if (!signedIn) return setScope(null)
    api.agents().then(
      (list) => setScope(list.scope),
      () => setScope(null)
    )
  }, [signedIn])

  useEffect(() => {
    const titles: Record<Route["page"], string> = { agents: "Agents", agent: "Agent", environment: "Environment", session: "Session" }
    document.title = `${titles[route.page]} · callgate`
  }, [route.page])

  if (!signedIn) {
    return html`<${SignIn}
      notice=${notice}
      onSignedIn=${() => {
        setNotice(null)
        setSignedIn(true)
      }}
    />`
  }

  const signOut = () => {
    session.signOut()
    setSignedIn(false)
    setNotice("Signed out. The key was forgotten by this tab.")
  }

  return html`<div class="shell">
    <header class="top">
      <a class="brand" href="#/agents">callgate</a>
      <span class="scope" data-testid="scope">
        ${scope === null ? "" : scope.kind === "admin" ? "Admin key: every agent" : `Scoped key: only ${scope.agentIds.join(", ")}`}
      </span>
      <button type="button" onClick=${signOut}>Sign out</button>
    </header>
    <main>
      ${route.page === "agents"
        ? html`<${AgentsPage} />`
        : route.page === "agent"
          ? html`<${AgentPage} key=${route.agentId} agentId=${route.agentId} section=${route.section} />`
          : route.page === "environment"
            ? html`<${EnvironmentPage} key=${`${route.agentId}/${route.environmentId}`} agentId=${route.agentId} environmentId=${route.environmentId} />`
            : html`<${SessionPage} key=${route.sessionId} agentId=${route.agentId} sessionId=${route.sessionId} />`}
    </main>
  </div>`
}

render(html`<${App} />`, document.getElementById("app")!)
