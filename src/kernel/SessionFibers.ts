import { Effect, type Fiber, Scope } from "effect"

/**
 * Two small helpers for per-session work that must not keep fiber state per call
 * (docs/design.md, "Per-call state").
 */

/**
 * Adds `finalizer` to the current scope as it is. `Effect.addFinalizer` (and `acquireRelease`)
 * keep a copy of the fiber's refs per finalizer, to run it with them; a finalizer that needs none
 * of them (it only interrupts, unsubscribes or closes) costs less this way.
 */
export const addScopeFinalizer = (finalizer: Effect.Effect<void>): Effect.Effect<void, never, Scope.Scope> =>
  Effect.flatMap(Effect.scope, (scope) => Scope.addFinalizer(scope, finalizer))

/**
 * The fiber `fork` started, while it still runs. A fiber forked from synchronous code runs at
 * once, up to its first wait, and may finish before `fork` returns: then undefined, so nobody
 * keeps (or later interrupts) a fiber that is over.
 */
export const whileRunning = <A, E>(fiber: Fiber.RuntimeFiber<A, E>): Fiber.RuntimeFiber<A, E> | undefined =>
  fiber.unsafePoll() === null ? fiber : undefined
