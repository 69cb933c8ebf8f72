import { Runtime } from "effect"
import type { FastifyInstance, FastifyRequest } from "fastify"
import { SocketGuards } from "../../websocket/SocketGuards.js"
import { wsWireSocket } from "../../websocket/WsWireSocket.js"
import { EntryPaths } from "../../kernel/EntryPaths.js"
import { CarrierStreams } from "../../telephony/streams/CarrierStreams.js"

/**
 * The carriers' media stream WebSockets. The handler adapts the socket and hands it to its
 * dialect handler in the same tick (fastify-websocket's advice: listeners attached later would
 * miss Twilio's first frames). Message size is capped by the app's ws maxPayload.
 */
export const registerStreamRoutes = (app: FastifyInstance, runtime: Runtime.Runtime<CarrierStreams | SocketGuards>) => {
  const streams = Runtime.runSync(runtime)(CarrierStreams)
  const guards = Runtime.runSync(runtime)(SocketGuards)
  // Each stream gets its per-socket limits (rate, HANDSHAKE_TIMEOUT until `start`, CARRIER_IDLE_TIMEOUT, send backlog).
  const accept = (dialect: "acceptTwilio" | "acceptTelnyx") => (socket: Parameters<typeof wsWireSocket>[0], request: FastifyRequest) => {
    const gate = guards.gate("carrier")
    const stream = streams[dialect](wsWireSocket(socket, undefined, gate), { url: request.url, headers: request.headers, address: request.ip })
    gate.authenticated = () => stream === undefined || stream.authenticated
  }
  // A stream authenticates with its first frames, after the upgrade: every upgrade is accepted, so
  // a carrier's real streams from an address others send bad ones from are never refused; a
  // refused stream counts against its address (AuthThrottle) and costs at most HANDSHAKE_TIMEOUT.
  app.get(EntryPaths.twilioStream, { websocket: true }, accept("acceptTwilio"))
  app.get(EntryPaths.telnyxStream, { websocket: true }, accept("acceptTelnyx"))
}
