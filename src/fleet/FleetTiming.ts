import { Duration } from "effect"

/** How often an instance refreshes its registry entry and its idle agents (docs/scaling.md). */
export const REFRESH_INTERVAL = Duration.seconds(2)

/**
 * An instance that has not refreshed for INSTANCE_TTL (AppConfig `instanceTtl`, default 10 s) is
 * gone: not listed, never placed on, its calls rescued by the survivors.
 */
export const goneAfterMs = (config: { readonly instanceTtl: Duration.Duration }) => Duration.toMillis(config.instanceTtl)

/** A reserved agent whose stream has not arrived after this long is free again. */
export const RESERVATION_HOLD_MS = 10_000
