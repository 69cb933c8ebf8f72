import { Duration, Effect } from "effect"
import { idleTicker } from "../kernel/Tickers.js"
import { AppConfig } from "../config/AppConfig.js"
import { type GateLimit, SocketGate } from "./SocketGate.js"
import { counterOn, sampledGaugeOn, Metrics } from "../observability/Metrics.js"

/** How often buckets are refilled and deadlines checked. */
export const GUARD_TICK = Duration.millis(100)

/** Bytes queued towards a carrier that stops reading before its stream is cut (the agent side's cap, LiveCall). */
export const MAX_CARRIER_BACKLOG_BYTES = 4 * 1024 * 1024

export type GuardedSide = "carrier" | "agent"

/**
 * The per-socket limits of every media stream and agent WebSocket (docs/security.md, "Per-socket
 * limits"): one SocketGate per socket, and one ticker for all of them (a fiber on the Effect
 * Clock, so TestClock drives it in tests) that refills the rate buckets and enforces
 * HANDSHAKE_TIMEOUT and CARRIER_IDLE_TIMEOUT while any socket is open (it sleeps while none is).
 * Sockets cut by a limit are counted by side and limit.
 */
export class SocketGuards extends Effect.Service<SocketGuards>()("callgate/SocketGuards", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const metrics = yield* Metrics
    const cut = counterOn(metrics.registry, "callgate_socket_limit_closes_total", "Media stream and agent sockets closed for exceeding a per-socket limit, by side and limit", ["side", "limit"])
    const gates = new Set<SocketGate>()
    sampledGaugeOn(metrics.registry, "callgate_guarded_sockets", "Media stream and agent sockets under per-socket limits", () => gates.size)
    const clock = yield* Effect.clock
    let lastTickMs = clock.unsafeCurrentTimeMillis()

    const tick = Effect.sync(() => {
      const now = clock.unsafeCurrentTimeMillis()
      const elapsed = Math.max(0, now - lastTickMs)
      lastTickMs = now
      for (const gate of gates) {
        if (gate.isClosed) gates.delete(gate)
        else gate.tick(now, elapsed)
      }
    })
    // The first gate opened while none was watched wakes the ticker; none runs while no socket is open.
    const ticker = yield* idleTicker({
      interval: GUARD_TICK,
      busy: () => gates.size > 0,
      tick,
      // Nothing was watched meanwhile: that time is neither elapsed for the buckets nor a stall.
      onWake: () => void (lastTickMs = clock.unsafeCurrentTimeMillis())
    })

    const settingsFor = (side: GuardedSide) =>
      side === "carrier"
        ? {
            rate: config.socketMessageRate,
            burst: config.socketMessageBurst,
            idleTimeoutMs: Duration.toMillis(config.carrierIdleTimeout),
            handshakeTimeoutMs: Duration.toMillis(config.handshakeTimeout),
            maxBacklogBytes: MAX_CARRIER_BACKLOG_BYTES
          }
        : { rate: config.socketMessageRate, burst: config.socketMessageBurst }

    return {
      /** A gate for a new socket, watched until it closes. Synchronous: call it in the upgrade handler. */
      gate: (side: GuardedSide): SocketGate => {
        const gate = new SocketGate(
          settingsFor(side),
          clock.unsafeCurrentTimeMillis(),
          (limit) => cut.inc({ side, limit }),
          () => clock.unsafeCurrentTimeMillis()
        )
        if (gates.size === 0) ticker.wake()
        gates.add(gate)
        return gate
      },
    } as const
  })
}) {}

export type { GateLimit }
