import { Duration, Effect, FiberSet } from "effect"

/** How long a stop waits for carrier commands and after-stream rescues still running. */
const STOP_GRACE = Duration.seconds(10)

/**
 * Work a carrier webhook starts and answers before it is done: Telnyx Call Control commands
 * (`answer`, `streaming_start`, `reject`) and the look at a stopped stream's session, with its
 * rescue (docs/reliability.md, "Instance loss"). The webhook is acknowledged at once (Telnyx
 * resends a webhook that waits on callgate's own REST calls); the work runs here, in the app's
 * scope, not detached: at a stop it is given STOP_GRACE to finish, then interrupted.
 */
export class EntryBackgroundWork extends Effect.Service<EntryBackgroundWork>()("EntryBackgroundWork", {
  scoped: Effect.gen(function* () {
    const fibers = yield* FiberSet.make<unknown, unknown>()
    // Runs before the set's own finalizer (finalizers run in reverse order): wait, then interrupt.
    yield* Effect.addFinalizer(() => FiberSet.awaitEmpty(fibers).pipe(Effect.timeoutOption(STOP_GRACE), Effect.asVoid))
    return {
      /** Starts `work` in the background; its failures are the caller's to log inside `work`. */
      start: <A, E>(work: Effect.Effect<A, E>): Effect.Effect<void> => FiberSet.run(fibers, work).pipe(Effect.asVoid)
    }
  })
}) {}
