import { Cause, Data, Duration, Effect, Option, Schedule } from "effect"

/**
 * The cause a store adapter gives a command refused because the connection is down (refused at
 * once, or given up after the client's reconnect attempts). The connection itself reports each
 * state change once (down, back); loops that retry such a command say nothing more.
 */
export const STORE_UNREACHABLE = "the store is unreachable"

/**
 * The cause a store adapter gives a write the primary took but fewer replicas than asked confirmed
 * in time (docs/scaling.md, "Nothing acknowledged is lost"): it may be lost in a failover, so it
 * counts as failed, and being idempotent it is simply written again.
 */
export class NotReplicated extends Error {
  constructor(readonly wanted: number, readonly confirmed: number, readonly timeoutMs: number) {
    super(`the write was not confirmed by ${wanted} replica(s) within ${timeoutMs} ms (${confirmed} did)`)
  }
}

/** The store could not be reached or answered something it should not have. Never carries data. */
export class StoreError extends Data.TaggedError("StoreError")<{
  readonly operation: string
  readonly cause?: unknown
}> {
  override get message() {
    return `store operation ${this.operation} failed`
  }

  /** Failed because the store cannot be reached, which its connection has already logged. */
  get unreachable(): boolean {
    return this.cause instanceof Error && this.cause.message === STORE_UNREACHABLE
  }

  /** The primary took the write but no replica confirmed it in time (NotReplicated). */
  get notReplicated(): NotReplicated | undefined {
    return this.cause instanceof NotReplicated ? this.cause : undefined
  }
}

const unreachableFailure = (error: unknown) => error instanceof StoreError && error.unreachable

/** Whether a failure (an error, or a Cause holding one) is the store being unreachable. */
export const isStoreUnreachable = (failure: unknown): boolean =>
  Cause.isCause(failure) ? Option.exists(Cause.failureOption(failure), unreachableFailure) : unreachableFailure(failure)

/**
 * A retrying loop's failure line: a warning, except while the store is unreachable, when it is a
 * debug line (the store connection said it once; docs/turns-and-breaker.md, "When Redis is slow or down").
 */
export const logStoreFailure = (message: string, failure: unknown, annotations: Record<string, unknown> = {}) =>
  isStoreUnreachable(failure) ? Effect.logDebug(message, annotations) : Effect.logWarning(message, annotations)

/** Optimistic-concurrency loops give up after this many conflicting writes in a row. */
export const MAX_CAS_ATTEMPTS = 100

/** A store command retried briefly (200 ms doubling, 5 retries, about 6 s): a blip must not lose a call's end. */
export const storeRetry = Schedule.exponential(Duration.millis(200)).pipe(Schedule.intersect(Schedule.recurs(5)))

/** A store command retried until the store answers (200 ms doubling, then every 5 s). */
export const untilTheStoreAnswers = Schedule.exponential(Duration.millis(200)).pipe(Schedule.union(Schedule.spaced(Duration.seconds(5))))
