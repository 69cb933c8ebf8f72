/**
 * The bare relay baseline: the smallest `ws` program that carries the same two-hop traffic as
 * callgate (carrier <-> relay <-> agent) with no logic at all. Carriers connect to /carrier/<key>,
 * agents to /agent/<key>; every message from one side is sent unchanged to the other. Whatever
 * callgate costs beyond this is the price of its own work.
 *
 *   npx tsx bench/baselineRelay.ts --port 9000
 */
import { createServer } from "node:http"
import { type WebSocket, WebSocketServer } from "ws"

interface Pair {
  carrier?: WebSocket
  agent?: WebSocket
  pendingForAgent: Array<Buffer | string>
}

export const startBaselineRelay = (port: number, host = "127.0.0.1") =>
  new Promise<{ port: number; close: () => Promise<void> }>((resolve) => {
    const pairs = new Map<string, Pair>()
    const server = createServer()
    const wss = new WebSocketServer({ server, maxPayload: 64 * 1024 })
    wss.on("connection", (socket, request) => {
      const [, role, key] = (request.url ?? "").split("/")
      if ((role !== "carrier" && role !== "agent") || !key) return socket.close(1008, "bad path")
      let pair = pairs.get(key)
      if (!pair) pairs.set(key, (pair = { pendingForAgent: [] }))
      const current = pair
      if (role === "carrier") {
        current.carrier = socket
        socket.on("message", (data, isBinary) => {
          const text = isBinary ? data : data.toString()
          if (current.agent) current.agent.send(text as Buffer)
          else current.pendingForAgent.push(text as Buffer)
        })
      } else {
        current.agent = socket
        for (const message of current.pendingForAgent) socket.send(message)
        current.pendingForAgent.length = 0
        socket.on("message", (data, isBinary) => current.carrier?.send(isBinary ? data : data.toString()))
      }
      socket.on("close", () => {
        const other = role === "carrier" ? current.agent : current.carrier
        other?.close()
        pairs.delete(key)
      })
      socket.on("error", () => socket.terminate())
    })
    server.listen(port, host, () => {
      const address = server.address()
      resolve({
        port: typeof address === "object" && address ? address.port : port,
        close: () =>
          new Promise<void>((done) => {
            for (const client of wss.clients) client.terminate()
            wss.close()
            server.close(() => done())
          })
      })
    })
  })

if (import.meta.url === `file://${process.argv[1]}`) {
  const index = process.argv.indexOf("--port")
  const port = index > 0 ? Number(process.argv[index + 1]) : 0
  void startBaselineRelay(port).then((relay) => {
    process.stdout.write(JSON.stringify({ ready: true, port: relay.port }) + "\n")
    process.once("SIGTERM", () => void relay.close().then(() => process.exit(0)))
  })
}
