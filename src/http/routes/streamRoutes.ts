import { Runtime } from "effect"
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify"
import { AuthThrottle } from "../../apikeys/AuthThrottle.js"
import { tooManyFailures } from "../ApiRoute.js"
import { SocketGuards } from "../../websocket/SocketGuards.js"
import { wsWireSocket } from "../../websocket/WsWireSocket.js"
import { EntryPaths } from "../../telephony/entry/EntryWire.js"
import { CarrierStreams } from "../../telephony/streams/CarrierStreams.js"

/**
 * The carriers' media stream WebSockets. The handler adapts the socket and hands it to its
 * dialect handler in the same tick (fastify-websocket's advice: listeners attached later would
 * miss Twilio's first frames). Message size is capped by the app's ws maxPayload.
 */
export const registerStreamRoutes = (app: FastifyInstance, runtime: Runtime.Runtime<CarrierStreams | SocketGuards | AuthThrottle>) => {
  const streams = Runtime.runSync(runtime)(CarrierStreams)
  const guards = Runtime.runSync(runtime)(SocketGuards)
  const throttle = Runtime.runSync(runtime)(AuthThrottle)
  // Each stream gets its per-socket limits (rate, HANDSHAKE_TIMEOUT until `start`, CARRIER_IDLE_TIMEOUT, send backlog).
  const accept = (dialect: "acceptTwilio" | "acceptTelnyx") => (socket: Parameters<typeof wsWireSocket>[0], request: FastifyRequest) => {
    const gate = guards.gate("carrier")
    const stream = streams[dialect](wsWireSocket(socket, undefined, gate), { url: request.url, headers: request.headers, address: request.ip })
    gate.authenticated = () => stream === undefined || stream.authenticated
  }
  // An address over AUTH_FAILURES_PER_MINUTE is refused before the upgrade.
  const throttled = async (request: FastifyRequest, reply: FastifyReply) => {
    const wait = throttle.retryAfter(request.ip)
    if (wait !== undefined) throw tooManyFailures(reply, wait)
  }
  app.get(EntryPaths.twilioStream, { websocket: true, preValidation: throttled }, accept("acceptTwilio"))
  app.get(EntryPaths.telnyxStream, { websocket: true, preValidation: throttled }, accept("acceptTelnyx"))
}
