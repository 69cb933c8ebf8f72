import { Effect, Fiber, Runtime, Scope } from "effect"

/**
 * Small helpers for per-session work that must not keep fiber state per call
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

/**
 * Starts `effect` on a fiber of the call's own: it runs at once (up to its first wait), and is
 * interrupted (and awaited) when the call's scope closes, if it still runs then.
 */
export type CallFork = <A, E>(effect: Effect.Effect<A, E>) => Fiber.RuntimeFiber<A, E>

/**
 * The call's fork (docs/design.md, "Per-call state"): one runtime and one set of running fibers per
 * call, and one finalizer on the call's scope that interrupts what still runs. Each fiber costs a
 * set entry and an observer. `Runtime.runFork(runtime, { scope })` would make, for every fiber, a
 * child scope with a finalizer, and close it when the fiber ends (a sequential walk over its
 * finalizers and their exits): the call's watchdog and record writes fork a few fibers a turn.
 * Forked after the scope closed: nothing runs (an interrupted fiber is answered).
 */
export const makeCallFork: Effect.Effect<CallFork, never, Scope.Scope> = Effect.gen(function* () {
  const runFork = Runtime.runFork(yield* Effect.runtime<never>())
  const running = new Set<Fiber.RuntimeFiber<unknown, unknown>>()
  let closed = false
  yield* addScopeFinalizer(
    Effect.suspend(() => {
      closed = true
      const left = [...running]
      running.clear()
      return left.length === 0 ? Effect.void : Fiber.interruptAll(left)
    })
  )
  const forget = (fiber: Fiber.RuntimeFiber<unknown, unknown>) => () => void running.delete(fiber)
  return <A, E>(effect: Effect.Effect<A, E>): Fiber.RuntimeFiber<A, E> => {
    if (closed) return runFork(Effect.interrupt as Effect.Effect<A, E>)
    const fiber = runFork(effect)
    if (fiber.unsafePoll() === null) {
      running.add(fiber)
      fiber.addObserver(forget(fiber))
    }
    return fiber
  }
})
