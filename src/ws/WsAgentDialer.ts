import { Duration, Effect, Layer } from "effect"
import { WebSocket } from "ws"
import { HardError } from "../core/HardError.js"
import { wsWireSocket } from "./WsWireSocket.js"
import { AgentConnection } from "../agent/AgentConnection.js"
import { AgentDialer } from "../agent/AgentDialer.js"

/** Same limit as the server side (HttpApp MAX_WS_MESSAGE_BYTES). */
const AGENT_MAX_MESSAGE_BYTES = 64 * 1024

/** Where the URL points, without path or query (which may carry credentials). */
const describeTarget = (url: string) => {
  try {
    return new URL(url).host
  } catch {
    return "an invalid URL"
  }
}

/**
 * Dial-out: opens a WebSocket to the environment's agentUrl for one call. Fails with a HardError
 * (agent_dial_failed) when the connection is refused, the handshake is answered with anything
 * but 101, or it takes longer than `timeout`. Interrupting the dial closes the socket.
 */
const dialAgent = (url: string, timeout: Duration.Duration): Effect.Effect<AgentConnection, HardError> =>
  Effect.async<AgentConnection, HardError>((resume) => {
    let settled = false
    let timer: ReturnType<typeof setTimeout> | undefined
    const settle = (effect: Effect.Effect<AgentConnection, HardError>) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      resume(effect)
    }
    const failed = (detail: string) =>
      settle(Effect.fail(new HardError({ kind: "agent_dial_failed", message: `Could not connect to the agent at ${describeTarget(url)}: ${detail}` })))

    let ws: WebSocket
    try {
      ws = new WebSocket(url, { handshakeTimeout: Duration.toMillis(timeout), maxPayload: AGENT_MAX_MESSAGE_BYTES, perMessageDeflate: false })
    } catch (error) {
      failed((error as Error).message)
      return
    }
    const connection = new AgentConnection(wsWireSocket(ws))
    timer = setTimeout(() => {
      ws.terminate()
      failed(`no connection within ${Duration.format(timeout)}`)
    }, Duration.toMillis(timeout))
    ws.once("open", () => settle(Effect.succeed(connection)))
    ws.once("error", (error) => failed(error.message))
    ws.once("close", () => failed("the connection closed during the handshake"))
    return Effect.sync(() => {
      clearTimeout(timer)
      if (!settled) ws.terminate()
    })
  })

/** The AgentDialer port over `ws`. */
export const WsAgentDialerLive = Layer.succeed(AgentDialer, AgentDialer.of({ dial: dialAgent }))
