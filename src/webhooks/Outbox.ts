import { Context, type Effect } from "effect"
import type { StoreError } from "../kernel/StoreError.js"
import type { SessionEndedEvent } from "./SessionEndedEvent.js"

/**
 * Where accepted events go to be delivered, durably, at least once. `enqueue` resolves only once
 * the event is stored; the delivery workers take it from there. An environment without a
 * webhookUrl at enqueue time gets nothing queued (enqueue succeeds and does nothing).
 */
export interface OutboxShape {
  readonly enqueue: (event: SessionEndedEvent) => Effect.Effect<void, StoreError>
}

export class Outbox extends Context.Tag("callgate/Outbox")<Outbox, OutboxShape>() {}
