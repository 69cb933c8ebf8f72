import { Runtime } from "effect"
import type { FastifyInstance } from "fastify"
import { wsWireSocket } from "../../ws/WsWireSocket.js"
import { EntryPaths } from "../../telephony/entry/EntryWire.js"
import { CarrierStreams } from "../../telephony/streams/CarrierStreams.js"

/**
 * The carriers' media stream WebSockets. The handler adapts the socket and hands it to its
 * dialect handler in the same tick (fastify-websocket's advice: listeners attached later would
 * miss Twilio's first frames). Message size is capped by the app's ws maxPayload.
 */
export const registerStreamRoutes = (app: FastifyInstance, runtime: Runtime.Runtime<CarrierStreams>) => {
  const streams = Runtime.runSync(runtime)(CarrierStreams)
  app.get(EntryPaths.twilioStream, { websocket: true }, (socket, request) =>
    streams.acceptTwilio(wsWireSocket(socket), { url: request.url, headers: request.headers })
  )
  app.get(EntryPaths.telnyxStream, { websocket: true }, (socket, request) =>
    streams.acceptTelnyx(wsWireSocket(socket), { url: request.url, headers: request.headers })
  )
}
