import { createServer, type Server, type Socket, connect } from "node:net"

/**
 * A TCP proxy on a free loopback port in front of `target` (a Redis, in the chaos tests), with the
 * partial faults of a real network:
 * - `pass`: bytes flow both ways, after `delayMs` each way (a store 300 ms away);
 * - `refuse`: every connection is reset and new ones are refused at once (a store that is down);
 * - `blackhole`: connections stay open and new ones are accepted, but no byte goes through either
 *   way (packets dropped: nothing closes, nothing answers).
 * Switching back to `pass` lets new connections through; those held in a black hole stay dead, as
 * a TCP connection whose packets were dropped for long does.
 */
export type ProxyMode = "pass" | "refuse" | "blackhole"

export interface TcpProxy {
  readonly port: number
  readonly url: string
  readonly mode: ProxyMode
  /** Switches the fault; `refuse` also resets the connections that are open. */
  readonly set: (mode: ProxyMode) => void
  /** Each way, for bytes that pass. */
  delayMs: number
  readonly close: () => Promise<void>
}

export const startTcpProxy = async (target: { readonly host: string; readonly port: number }, scheme = "redis"): Promise<TcpProxy> => {
  const pairs = new Set<{ client: Socket; upstream: Socket }>()
  let mode: ProxyMode = "pass"
  const proxy: TcpProxy = {
    port: 0,
    url: "",
    get mode() {
      return mode
    },
    set: (next) => {
      mode = next
      if (next === "refuse") for (const { client, upstream } of pairs) (client.resetAndDestroy(), upstream.destroy())
    },
    delayMs: 0,
    close: async () => {
      for (const { client, upstream } of pairs) {
        client.destroy()
        upstream.destroy()
      }
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
  // Each direction's bytes: dropped in a black hole, else forwarded after the delay, in order.
  const forward = (from: Socket, to: Socket) => {
    from.on("data", (chunk: Buffer) => {
      if (mode === "blackhole") return
      if (proxy.delayMs <= 0) to.write(chunk)
      else setTimeout(() => to.destroyed || to.write(chunk), proxy.delayMs)
    })
  }
  const server: Server = createServer((client) => {
    if (mode === "refuse") return void client.resetAndDestroy()
    const upstream = connect(target.port, target.host)
    const pair = { client, upstream }
    pairs.add(pair)
    const end = () => {
      pairs.delete(pair)
      client.destroy()
      upstream.destroy()
    }
    client.on("error", end).on("close", end)
    upstream.on("error", end).on("close", end)
    forward(client, upstream)
    forward(upstream, client)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const port = (server.address() as { port: number }).port
  Object.assign(proxy, { port, url: `${scheme}://127.0.0.1:${port}` })
  return proxy
}
