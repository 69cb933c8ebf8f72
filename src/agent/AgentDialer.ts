import { Context, type Duration, type Effect } from "effect"
import type { HardError } from "../kernel/HardError.js"
import type { AgentConnection } from "./AgentConnection.js"

/**
 * Dial-out (docs/calls.md, "Agents"): opens a connection to an environment's agentUrl for one
 * call. The port lives here, with its consumer (AgentConnector); the WebSocket adapter is
 * websocket/WsAgentDialer.ts. Fails with a HardError (`agent_dial_failed`); interrupting the dial closes
 * the socket.
 */
export interface AgentDialerShape {
  readonly dial: (url: string, timeout: Duration.Duration) => Effect.Effect<AgentConnection, HardError>
}

export class AgentDialer extends Context.Tag("callgate/AgentDialer")<AgentDialer, AgentDialerShape>() {}
