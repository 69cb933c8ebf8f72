import { Effect, Either, Option } from "effect"
import type { RedisClient as Redis } from "./RedisConnection.js"
import { redisCall } from "./RedisConnection.js"
import { redisScript } from "./RedisScript.js"
import { MAX_CAS_ATTEMPTS, StoreError } from "../kernel/StoreError.js"

/**
 * Records kept as a hash {v: version, doc: JSON} are changed through this script: it writes only
 * when `v` is still the version the writer read, so concurrent read-modify-writes of one record
 * re-read and re-apply instead of overwriting each other. -1: the record is gone; 0: conflict.
 */
const casScript = redisScript(`
local current = redis.call('HGET', KEYS[1], 'v')
if current == false then return -1 end
if current ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'doc', ARGV[3])
return 1
`)

class CasConflict {
  readonly _tag = "CasConflict"
}

export interface CompareAndSet<A, E> {
  readonly client: Redis
  readonly key: string
  /** Names the operation in a StoreError. */
  readonly operation: string
  /** The record and its current version, or none when there is no record. */
  readonly read: Effect.Effect<Option.Option<{ readonly version: number; readonly value: A }>, StoreError>
  /** The pure change; a Left refuses the write and is returned as the failure. */
  readonly change: (current: A) => Either.Either<A, E>
  /** The record as written at `version` (e.g. with its version field set). */
  readonly stamp?: (next: A, version: number) => A
}

/** A read-modify-write that never loses a concurrent write: retried while another writer got in between. */
export const compareAndSet = <A, E>(options: CompareAndSet<A, E>): Effect.Effect<Option.Option<A>, StoreError | E> => {
  const { client, key, operation } = options
  const attempt: Effect.Effect<Option.Option<A>, StoreError | E | CasConflict> = Effect.gen(function* () {
    const current = yield* options.read
    if (Option.isNone(current)) return Option.none()
    const changed = yield* Either.match(options.change(current.value.value), { onLeft: Effect.fail, onRight: Effect.succeed })
    const version = current.value.version + 1
    const next = options.stamp ? options.stamp(changed, version) : changed
    const written = yield* redisCall(operation, () =>
      casScript(client, [key], [String(current.value.version), String(version), JSON.stringify(next)])
    )
    if (written === -1) return Option.none()
    if (written !== 1) return yield* Effect.fail(new CasConflict())
    return Option.some(next)
  })
  return attempt.pipe(
    Effect.retry({ while: (error) => error instanceof CasConflict, times: MAX_CAS_ATTEMPTS }),
    Effect.catchIf(
      (error): error is CasConflict => error instanceof CasConflict,
      () => Effect.fail(new StoreError({ operation: `${operation} (too many concurrent writers)` }))
    )
  )
}
