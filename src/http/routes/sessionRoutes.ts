import { Effect } from "effect"
import { AgentParams } from "../../environments/EnvironmentSchema.js"
import { Session, SessionListQuery, SessionPageView, SessionParams } from "../../sessions/SessionSchema.js"
import { Sessions } from "../../sessions/Sessions.js"
import { apiRoute } from "../ApiRoute.js"

const base = "/v1/agents/:agentId/sessions"

export const sessionRoutes = [
  apiRoute({
    method: "GET",
    path: base,
    summary: "List the agent's call sessions, newest first (filter by environment and status)",
    tag: "sessions",
    auth: "agent",
    params: AgentParams,
    query: SessionListQuery,
    response: SessionPageView,
    handler: ({ params, query }) => Effect.flatMap(Sessions, (sessions) => sessions.list(params.agentId, query))
  }),
  apiRoute({
    method: "GET",
    path: `${base}/:sessionId`,
    summary: "Get one call session",
    tag: "sessions",
    auth: "agent",
    params: SessionParams,
    response: Session,
    handler: ({ params }) => Effect.flatMap(Sessions, (sessions) => sessions.get(params.agentId, params.sessionId))
  })
]
