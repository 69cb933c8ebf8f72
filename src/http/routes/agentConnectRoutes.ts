import { Effect, Exit, Runtime } from "effect"
import type { FastifyInstance, FastifyRequest } from "fastify"
import { ApiKeys } from "../../apikeys/ApiKeys.js"
import type { AuthThrottle } from "../../apikeys/AuthThrottle.js"
import { Environments } from "../../environments/Environments.js"
import { ApiError } from "../ApiError.js"
import { authenticationHook, principalOf, toApiError } from "../ApiRoute.js"
import { SocketGuards } from "../../websocket/SocketGuards.js"
import { wsWireSocket } from "../../websocket/WsWireSocket.js"
import { AgentConnection } from "../../agent/AgentConnection.js"
import { AgentPool } from "../../agent/AgentPool.js"
import { InstanceRegistry } from "../../fleet/InstanceRegistry.js"

export const AGENT_CONNECT_PATH = "/v1/agents/:agentId/environments/:environmentId/connect"

interface ConnectParams {
  readonly agentId: string
  readonly environmentId: string
}

/**
 * Dial-in agent workers: `GET /v1/agents/{agentId}/environments/{environmentId}/connect` as a
 * WebSocket with `Authorization: Bearer <key>` (admin, or a key scoped to that agent). The upgrade
 * is refused with the JSON error envelope: 401 without a valid key, 403 for another agent's key,
 * 404 for an unknown environment, 503 while shutting down. Each accepted socket is one unit of
 * idle capacity for the environment until a call takes it. The socket is in the fleet's registry
 * before the upgrade is answered (announced, then published: docs/scaling.md), so a call placed on
 * any instance once the agent sees the socket open finds it.
 */
export const registerAgentRoutes = (
  app: FastifyInstance,
  runtime: Runtime.Runtime<ApiKeys | AuthThrottle | Environments | AgentPool | SocketGuards | InstanceRegistry>
) => {
  const run = Runtime.runPromiseExit(runtime)
  const pool = Runtime.runSync(runtime)(AgentPool)
  const guards = Runtime.runSync(runtime)(SocketGuards)
  const registry = Runtime.runSync(runtime)(InstanceRegistry)
  // The id each upgrade was announced under (preValidation), for its handler.
  const announcedIds = new WeakMap<FastifyRequest, string>()

  // Open sockets by the scoped key they came in with: revoking the key (on any instance) closes them.
  const socketsByKey = new Map<string, Set<{ close: (code: number, reason: string) => void }>>()
  const stopListening = Runtime.runSync(runtime)(ApiKeys).onRevoked((keyId) => {
    const sockets = socketsByKey.get(keyId)
    socketsByKey.delete(keyId)
    for (const socket of sockets ?? []) socket.close(1008, "the API key was revoked")
  })
  app.addHook("onClose", async () => stopListening())

  const environmentExists = async (request: FastifyRequest) => {
    const { agentId, environmentId } = request.params as ConnectParams
    const exit = await run(Effect.flatMap(Environments, (envs) => envs.get(agentId, environmentId)))
    if (Exit.isSuccess(exit)) return
    throw exit.cause._tag === "Fail" ? toApiError(exit.cause.error) : ApiError.of("INTERNAL")
  }

  app.get(
    AGENT_CONNECT_PATH,
    {
      websocket: true,
      preValidation: [
        authenticationHook(runtime, "agent"),
        async (request) => {
          if (!pool.isAccepting()) throw ApiError.of("UNAVAILABLE", "callgate is shutting down: connect to another instance.")
          await environmentExists(request)
          const { agentId, environmentId } = request.params as ConnectParams
          const socketId = pool.announce(agentId, environmentId)
          announcedIds.set(request, socketId)
          // An upgrade that never reaches the handler (the client went away) withdraws it; once offered, this is a no-op.
          request.raw.socket.once("close", () => pool.withdraw(agentId, environmentId, socketId))
          // Published before the upgrade is answered; a store that does not answer only delays it to the next refresh.
          await run(registry.flush(agentId, environmentId))
        }
      ]
    },
    (socket, request) => {
      const { agentId, environmentId } = request.params as ConnectParams
      const principal = principalOf(request)
      if (principal?.kind === "scoped") {
        let sockets = socketsByKey.get(principal.keyId)
        if (sockets === undefined) socketsByKey.set(principal.keyId, (sockets = new Set()))
        sockets.add(socket)
        socket.once("close", () => {
          sockets.delete(socket)
          if (sockets.size === 0 && socketsByKey.get(principal.keyId) === sockets) socketsByKey.delete(principal.keyId)
        })
      }
      pool.offer(agentId, environmentId, new AgentConnection(wsWireSocket(socket, undefined, guards.gate("agent"))), announcedIds.get(request))
    }
  )
}
