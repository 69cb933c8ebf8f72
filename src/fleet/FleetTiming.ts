import { Duration } from "effect"

/** How often an instance refreshes its registry entry and its idle agents (docs/scaling.md). */
export const REFRESH_INTERVAL = Duration.seconds(2)

/** An instance that has not refreshed for this long is gone: not listed, never placed on. */
export const GONE_AFTER_MS = 10_000

/** A reserved agent whose stream has not arrived after this long is free again. */
export const RESERVATION_HOLD_MS = 10_000
