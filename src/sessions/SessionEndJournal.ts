import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { Deferred, Duration, Effect, Either, FiberMap, Option, Redacted, Schema } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { InstanceIdentity } from "../config/InstanceIdentity.js"
import { counterOn, sampledGaugeOn, Metrics } from "../observability/Metrics.js"
import { type StoreError, untilTheStoreAnswers } from "../kernel/StoreError.js"
import { TurnRecord } from "../turns/TurnRecord.js"
import { Outbox } from "../webhooks/Outbox.js"
import { isOpenStatus, Session } from "./SessionSchema.js"
import { notAnswered } from "./TransferOutcomes.js"
import { sessionEndedEvent, Sessions } from "./Sessions.js"

/**
 * One session end to carry into the store: the terminal record as this instance knows it (written
 * whole when the store has no record of the session), the turns its observer saw (undefined: keep
 * the stored ones), and whether an already-ended record may take this record's fallback (a claimed
 * orphan, rescued after the claim ended it).
 */
export const SessionEndJob = Schema.Struct({
  session: Session,
  turns: Schema.optional(Schema.Array(TurnRecord)),
  fillFallback: Schema.optional(Schema.Boolean)
})
export type SessionEndJob = typeof SessionEndJob.Type

const Spool = Schema.parseJson(Schema.Struct({ version: Schema.Literal(1), jobs: Schema.Array(SessionEndJob) }))
const decodeSpool = Schema.decodeUnknownEither(Spool)
const encodeSpool = Schema.encodeSync(Spool)

/** Replayed spool entries tried at once at start. */
const REPLAY_CONCURRENCY = 16

/** The store's address for logs: scheme, host, port and database, never the credentials. */
export const storeAddress = (
  config: Pick<AppConfig, "redisUrl" | "redisClusterNodes" | "redisSentinels" | "redisSentinelName">
): string => {
  if (Option.isSome(config.redisSentinels)) {
    return `Redis Sentinel primary ${Option.getOrElse(config.redisSentinelName, () => "")} (sentinels ${config.redisSentinels.value})`
  }
  if (Option.isSome(config.redisClusterNodes)) return `Redis Cluster ${Redacted.value(config.redisClusterNodes.value)}`
  return Option.match(config.redisUrl, {
    onNone: () => "the embedded in-memory store",
    onSome: (url) => {
      try {
        const parsed = new URL(Redacted.value(url))
        return `${parsed.protocol}//${parsed.host}${parsed.pathname === "/" ? "" : parsed.pathname}`
      } catch {
        return "the configured Redis"
      }
    }
  })
}

/**
 * The transfer this end leaves pending was an agent's, not answered, and its outcome came first
 * and re-opened the session for the caller's return (docs/fallback.md, "The return path"): the
 * open session is the caller's new stay, which this end must not close.
 */
const cameBack = (ending: Session, current: Session): boolean => {
  const left = ending.pendingTransfer
  if (left === undefined || current.pendingTransfer !== undefined) return false
  return (current.transfers ?? []).some(
    (t) => t.startedAt === left.startedAt && t.initiatedBy === "agent" && t.carrierStatus !== null && notAnswered(t.status)
  )
}

export const spoolFile = (dataDir: string, instanceId: string) => join(dataDir, `session-ends.${instanceId}.json`)

/**
 * The way every session end reaches the store (docs/reliability.md, "Store outages"): write the
 * record's end, queue its session.ended, let go of the session's ownership. Each step is
 * idempotent, so a job is simply run again until it succeeds. The first try runs in the caller;
 * a job the store refuses (unreachable) is kept in memory and retried with backoff until the store
 * answers, however long that takes. At a stop the jobs still kept are written to a spool file in
 * DATA_DIR, which the next start reads first and replays.
 *
 * The backlog is bounded by SESSION_END_BACKLOG_LIMIT for new calls only (the entry refuses calls
 * while it is full); an ending call is always kept.
 */
export class SessionEndJournal extends Effect.Service<SessionEndJournal>()("callgate/SessionEndJournal", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const { instanceId } = yield* InstanceIdentity
    const sessions = yield* Sessions
    const outbox = yield* Outbox
    const metrics = yield* Metrics
    const address = storeAddress(config)
    const file = spoolFile(config.dataDir, instanceId)

    /** Jobs not yet through, by session id: tried inline, retrying in the background, or replayed. */
    const pending = new Map<string, SessionEndJob>()
    /** How many kept jobs wait on the store (not counting first tries in progress). */
    let kept = 0
    let stopping = false

    sampledGaugeOn(metrics.registry, "callgate_session_end_backlog", "Session ends (record write, session.ended) kept in memory because the store did not take them yet", () => kept)
    const retries = counterOn(metrics.registry, "callgate_session_end_retries_total", "Attempts to carry a kept session end into the store again")
    const spooled = counterOn(metrics.registry, "callgate_session_end_spooled_total", "Session ends written to the local spool at a stop because the store had not taken them")

    /** The job's three idempotent steps; the record as stored; fails only with the store's error. */
    const attempt = (job: SessionEndJob): Effect.Effect<Session, StoreError> =>
      Effect.gen(function* () {
        const { session } = job
        let returned = false
        const written = yield* sessions.update(session.agentId, session.id, (current) => {
          returned = isOpenStatus(current.status) && cameBack(session, current)
          if (returned) return current
          if (isOpenStatus(current.status)) {
            // A transfer this end leaves ringing stays pending until its outcome (TransferOutcomes);
            // one whose carrier request failed is dropped with this end.
            const { pendingTransfer, awaitingStreamUntil: _back, streamMovingTo: _moving, ...rest } = current
            const stillPending = session.pendingTransfer !== undefined && pendingTransfer !== undefined
            return {
              ...rest,
              ...(stillPending ? { pendingTransfer } : {}),
              status: session.status,
              endReason: session.endReason,
              endedAt: session.endedAt,
              fallback: session.fallback ?? current.fallback,
              turns: job.turns ?? current.turns,
              ...(session.recording !== undefined ? { recording: session.recording } : {}),
              ...(session.agentLegs !== undefined ? { agentLegs: session.agentLegs } : {}),
              ...(session.agentFailovers !== undefined ? { agentFailovers: session.agentFailovers } : {})
            }
          }
          if (job.fillFallback === true && current.fallback === null && session.fallback !== null) {
            return { ...current, fallback: session.fallback }
          }
          return current
        })
        // No record (its start was never written): the whole terminal record is.
        const stored = Option.isSome(written)
          ? written.value
          : yield* Effect.as(sessions.record({ ...session, turns: job.turns ?? session.turns }), session)
        // Back with an agent (or the fallback) since: that stay ends the session, and sends its session.ended.
        if (returned) return stored
        // A transfer still pending sends session.ended with its outcome (docs/fallback.md, "Transfer outcomes"),
        // and the session stays owned until then: the fleet's reconciliation finds it if this instance dies.
        if (stored.pendingTransfer !== undefined) return stored
        yield* outbox.enqueue(sessionEndedEvent(stored))
        if (session.instanceId !== undefined) {
          yield* sessions.disown(session.instanceId, { agentId: session.agentId, sessionId: session.id })
        }
        return stored
      })

    const fibers = yield* FiberMap.make<string, void, never>()

    /**
     * A rescuer's fallback record that came while another end of the same session was being
     * written (the fleet's sweep finishing a session a survivor had just claimed and was rescuing):
     * kept here and filled in once that write is through, never dropped.
     */
    const fillsAfter = new Map<string, SessionEndJob>()
    /** The session's end is through (written, or given up): a fill that waited on it goes now. */
    const through = (id: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        pending.delete(id)
        const fill = fillsAfter.get(id)
        if (fill === undefined) return Effect.void
        fillsAfter.delete(id)
        return Effect.asVoid(FiberMap.run(fibers, `${id} fill`, Effect.asVoid(submit(fill))))
      })

    const done = (job: SessionEndJob) =>
      Effect.gen(function* () {
        yield* through(job.session.id)
        kept--
        if (kept === 0) yield* Effect.logInfo(`the store at ${address} answers again: every kept session end is written and its session.ended queued`)
      })

    /** Retries a kept job until the store takes it (interrupted only at a stop, which spools it). */
    const keep = (job: SessionEndJob) =>
      Effect.gen(function* () {
        kept++
        yield* FiberMap.run(
          fibers,
          job.session.id,
          Effect.sleep(Duration.millis(200)).pipe(
            Effect.zipRight(
              attempt(job).pipe(
                Effect.tapError(() => Effect.sync(() => retries.inc())),
                Effect.retry(untilTheStoreAnswers),
                Effect.zipRight(Effect.sync(() => retries.inc()))
              )
            ),
            Effect.zipRight(done(job)),
            Effect.catchAllCause((cause) => Effect.logError("a kept session end failed for good", cause))
          )
        )
      })

    /**
     * Carries one session end into the store. Resolves once it is there (with the record as
     * stored), or once it is kept (the store did not answer; with the record as this instance
     * knows it): never fails, never waits for the store to come back.
     */
    const submit = (job: SessionEndJob): Effect.Effect<Session> =>
      Effect.gen(function* () {
        const id = job.session.id
        if (pending.has(id)) {
          if (job.fillFallback === true && job.session.fallback !== null) fillsAfter.set(id, job)
          return job.session
        }
        pending.set(id, job)
        const first = yield* Effect.either(attempt(job))
        if (Either.isRight(first)) {
          yield* through(id)
          return first.right
        }
        if (kept === 0) {
          const unconfirmed = first.left.notReplicated
          yield* unconfirmed === undefined
            ? Effect.logError(`the store at ${address} is unreachable: session ends are kept in memory and retried until it answers`, {
                error: first.left.message
              })
            : Effect.logError(
                `no replica of the store at ${address} confirmed a session end within ${unconfirmed.timeoutMs} ms: session ends are kept in memory and retried until one does`,
                { error: unconfirmed.message }
              )
        }
        yield* keep(job)
        return job.session
      })

    // A spool under another id (INSTANCE_ID changed, or another instance's DATA_DIR) is not this
    // instance's to replay: said once, left where it is.
    const strangers = otherSpools(config.dataDir, file)
    if (strangers.length > 0) {
      yield* Effect.logWarning("DATA_DIR holds spools of other instance ids; they are not replayed by this instance", {
        instanceId,
        files: strangers.join(", ")
      })
    }

    // The spool of the previous run, before anything else: its jobs are kept first and tried now.
    const replay = yield* Deferred.make<void>()
    const loaded = readSpool(file)
    if (loaded.length > 0) {
      yield* Effect.logInfo(`replaying ${loaded.length} session ends spooled at the last stop`, { file })
      yield* Effect.forEach(
        loaded,
        (job) =>
          Effect.gen(function* () {
            if (pending.has(job.session.id)) return
            pending.set(job.session.id, job)
            const first = yield* Effect.either(attempt(job))
            if (Either.isRight(first)) yield* through(job.session.id)
            else yield* keep(job)
          }),
        { concurrency: REPLAY_CONCURRENCY, discard: true }
      )
      const waitReplayed = Effect.gen(function* () {
        const ids = new Set(loaded.map((job) => job.session.id))
        while ([...ids].some((id) => pending.has(id))) yield* Effect.sleep(Duration.millis(100))
        if (!stopping) yield* Effect.sync(() => rmSync(file, { force: true }))
        yield* Effect.logInfo("the spooled session ends are all written")
      })
      yield* waitReplayed.pipe(Effect.zipRight(Deferred.succeed(replay, undefined)), Effect.forkScoped)
    } else {
      yield* Deferred.succeed(replay, undefined)
    }

    // At a stop, whatever is still kept goes to the spool (after live calls drained: this service
    // is built before the sessions, so it is released after them).
    yield* Effect.addFinalizer(() =>
      Effect.gen(function* () {
        stopping = true
        // A fill still waiting rides with the end it waited on.
        const jobs = [...pending.values()].map((job): SessionEndJob => {
          const fill = fillsAfter.get(job.session.id)
          return fill === undefined || job.session.fallback !== null ? job : { ...job, session: { ...job.session, fallback: fill.session.fallback }, fillFallback: true }
        })
        const result = yield* Effect.either(Effect.try(() => writeSpool(file, jobs)))
        if (Either.isLeft(result)) {
          yield* Effect.logError(`could not write the spool: ${jobs.length} session ends are lost`, { file, error: String(result.left.error) })
          return
        }
        if (jobs.length > 0) {
          spooled.inc(jobs.length)
          yield* Effect.logWarning(`${jobs.length} session ends the store at ${address} did not take are spooled for the next start`, { file })
        }
      })
    )

    return {
      submit,
      /** Resolves once every session end spooled by the previous run is in the store. */
      replayed: Deferred.await(replay),
      /** Full: new calls are refused until the store takes the kept ends. */
      isFull: (): boolean => kept >= config.sessionEndBacklogLimit,
      /** Kept ends waiting for the store. */
      backlog: (): number => kept,
      /** True while this session's end is on its way (tried, kept or replayed). */
      isPending: (sessionId: string): boolean => pending.has(sessionId)
    } as const
  })
}) {}

const otherSpools = (dataDir: string, own: string): ReadonlyArray<string> => {
  try {
    return readdirSync(dataDir)
      .filter((name) => /^session-ends\..+\.json$/.test(name))
      .map((name) => join(dataDir, name))
      .filter((path) => path !== own)
  } catch {
    return []
  }
}

const readSpool = (file: string): ReadonlyArray<SessionEndJob> => {
  let text: string
  try {
    text = readFileSync(file, "utf8")
  } catch {
    return []
  }
  const decoded = decodeSpool(text)
  if (Either.isLeft(decoded)) throw new Error(`the spool ${file} cannot be read: ${decoded.left.message}`)
  return decoded.right.jobs
}

/** Replaces the spool atomically (temporary file, then rename); none when there is nothing to keep. */
const writeSpool = (file: string, jobs: ReadonlyArray<SessionEndJob>) => {
  if (jobs.length === 0) {
    rmSync(file, { force: true })
    return
  }
  mkdirSync(join(file, ".."), { recursive: true })
  writeFileSync(`${file}.tmp`, encodeSpool({ version: 1, jobs }))
  renameSync(`${file}.tmp`, file)
}
