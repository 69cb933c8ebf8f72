import { type Duration, Effect, Queue, type Scope } from "effect"

/**
 * Background loops on the Effect clock (TestClock drives them in tests), written as plain
 * run-then-sleep loops (docs/benchmarks.md, "Background loops"): an `Effect.repeat(Schedule.spaced(...))`
 * costs about twice the CPU per round (its schedule driver allocates intervals, decisions and
 * chunks every time), and a process runs several of these loops for as long as it lives.
 */

/** Runs `effect`, then waits `interval`, for ever (as `Effect.repeat(Schedule.spaced(interval))`); ends at the first failure. */
export const repeatSpaced = <A, E, R>(effect: Effect.Effect<A, E, R>, interval: Duration.DurationInput): Effect.Effect<never, E, R> =>
  Effect.forever(Effect.zipRight(effect, Effect.sleep(interval)))

/**
 * A ticker for work that exists only while something is watched (open sockets, live recordings):
 * `tick` every `interval` while `busy()`, and no timer at all while it is not, so an idle instance
 * is not woken several times a second. `wake()` (synchronous) must be called when the first thing
 * to watch is added; `onWake` runs when the ticker resumes after an idle spell. Forked in the
 * caller's scope.
 */
export const idleTicker = (options: {
  readonly interval: Duration.DurationInput
  readonly busy: () => boolean
  readonly tick: Effect.Effect<void>
  readonly onWake?: () => void
}): Effect.Effect<{ readonly wake: () => void }, never, Scope.Scope> =>
  Effect.gen(function* () {
    const wakeups = yield* Queue.sliding<true>(1)
    const round = Effect.gen(function* () {
      if (!options.busy()) {
        yield* Queue.take(wakeups)
        options.onWake?.()
      }
      yield* Effect.sleep(options.interval)
      yield* options.tick
    })
    yield* Effect.forkScoped(Effect.forever(round))
    return { wake: () => void Queue.unsafeOffer(wakeups, true) }
  })
