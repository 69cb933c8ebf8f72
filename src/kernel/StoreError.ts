import { Data } from "effect"

/** The store could not be reached or answered something it should not have. Never carries data. */
export class StoreError extends Data.TaggedError("StoreError")<{
  readonly operation: string
  readonly cause?: unknown
}> {
  override get message() {
    return `store operation ${this.operation} failed`
  }
}

/** Optimistic-concurrency loops give up after this many conflicting writes in a row. */
export const MAX_CAS_ATTEMPTS = 100
