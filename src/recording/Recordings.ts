import { randomBytes } from "node:crypto"
import { createReadStream, close as closeFd, mkdir, open as openFd, write as writeFd } from "node:fs"
import { open as openHandle } from "node:fs/promises"
import { dirname } from "node:path"
import type { Readable } from "node:stream"
import { Data, Duration, Effect, Option, Runtime } from "effect"
import parseRange from "range-parser"
import { AppConfig } from "../config/AppConfig.js"
import { InstanceIdentity } from "../config/InstanceIdentity.js"
import { PublicUrl } from "../config/PublicUrl.js"
import type { CarrierLeg } from "../kernel/CallLegs.js"
import { idleTicker } from "../kernel/Tickers.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"
import type { RecordingMode } from "../environments/EnvironmentSchema.js"
import { Environments } from "../environments/Environments.js"
import { counterOn, Metrics, sampledGaugeOn } from "../observability/Metrics.js"
import { CallRecording, type FlushedAudio, type RecordingPause, WINDOW_SAMPLES } from "./CallRecording.js"
import {
  finishWav,
  isPartFile,
  listRecordings,
  listSessionParts,
  objectNamesOf,
  pathsOf,
  type RecordingMeta,
  type RecordingPaths,
  removeLocal,
  stemOf,
  writeMeta
} from "./RecordingFiles.js"
import { type JoinedRecording, joinParts, streamJoined } from "./RecordingJoin.js"
import { RecordingLeg } from "./RecordingLeg.js"
import { readRecordingSettings } from "./RecordingSettings.js"
import type { S3Bucket } from "./S3Bucket.js"
import { dataBytesOf, FRAME_BYTES, HEADER_BYTES, PROVISIONAL_SIZE, sampleRateOf, wavHeader } from "./Wav.js"

export class RecordingNotFound extends Data.TaggedError("RecordingNotFound")<{ readonly agentId: string; readonly sessionId: string }> {}
export class RecordingInProgress extends Data.TaggedError("RecordingInProgress")<{ readonly agentId: string; readonly sessionId: string }> {}
export class RecordingUnavailable extends Data.TaggedError("RecordingUnavailable")<{ readonly message: string }> {}
export class RangeNotSatisfiable extends Data.TaggedError("RangeNotSatisfiable")<{ readonly size: number }> {}

/** What `session.ended` and the session record carry about a finished recording. */
export interface RecordingSummary {
  readonly url: string
  readonly durationMs: number
  readonly pauses: ReadonlyArray<{ readonly startMs: number; readonly endMs: number }>
}

/** A recording's bytes as /v1 serves them. */
export interface RecordingDownload {
  readonly body: Readable
  /** Bytes of the whole file. */
  readonly size: number
  /** The range served (inclusive), when the request asked for one. */
  readonly range: { readonly start: number; readonly end: number } | undefined
}

/** The ticker's period; each recording is flushed when a second has passed since its last flush. */
const TICK = Duration.millis(200)
const FLUSH_EVERY_MS = 1000
/** A sidecar still "recording" whose WAV has not changed for this long belongs to a lost instance (carriers send every 20 ms). */
const ABANDONED_AFTER_MS = 60_000
/** How long `finish` waits for the upload to the bucket before the session's end goes on without it. */
const UPLOAD_WAIT = Duration.seconds(30)
/** Output buffers of one flush: up to the window's audio as PCM at 8 kHz (a second's at 16 kHz). */
const POOL_BUFFER_BYTES = WINDOW_SAMPLES * FRAME_BYTES
const MAX_POOLED = 64
/** How long the instance that ends a moved call waits for the earlier parts to be finished (and visible) before summing them up. */
const JOIN_WAIT_TRIES = 50
const JOIN_WAIT_STEP = Duration.millis(100)

/** A finished part of a session's recording, on disk or in the bucket. */
interface StoredPart {
  readonly meta: RecordingMeta
  /** Bytes of the part's WAV file. */
  readonly fileBytes: number
  readonly source: { readonly disk: string } | { readonly object: string }
}

interface Live {
  readonly info: SessionInfo
  readonly leg: RecordingLeg
  readonly paths: RecordingPaths
  readonly startedAt: string
  /** The part's name after the session id: undefined for the call's first stream, set for a stream it was moved to. */
  readonly part: string | undefined
  readonly stem: string
  /** When the part's stream began (epoch ms): where the part goes when the parts are joined. */
  readonly partStartedAtMs: number
  /** Resolves once the environment was read: whether the call is recorded. */
  decided: Promise<boolean>
  fd: number | undefined
  /** The audio write in flight, if any. */
  inflight: Promise<void> | undefined
  /** The sidecar write in flight, if any (sidecar writes are chained, never concurrent). */
  metaWrite: Promise<void>
  finishing: boolean
  failed: boolean
}

const closedPauses = (pauses: ReadonlyArray<RecordingPause>, endMs: number) =>
  pauses.map((pause) => ({ startMs: pause.startMs, endMs: pause.endMs ?? endMs }))

/**
 * Call recording (docs/recording.md): decides per call from the environment's `recording` field,
 * taps the call's audio (RecordingLeg, CallRecording: synchronous, per frame a copy into the
 * call's window), writes each recording once a second from one shared ticker (a positional write
 * of PCM into its WAV file), finishes the file when the call ends (header, sidecar, upload to the
 * bucket), finishes files a crash left, deletes recordings past RECORDINGS_RETENTION_DAYS, and
 * serves them to /v1.
 */
export class Recordings extends Effect.Service<Recordings>()("callgate/Recordings", {
  scoped: Effect.gen(function* () {
    const clock = yield* Effect.clock
    const settings = yield* readRecordingSettings
    const config = yield* AppConfig
    const environments = yield* Environments
    const publicUrl = yield* PublicUrl
    const { instanceId } = yield* InstanceIdentity
    const metrics = yield* Metrics
    const runtime = yield* Effect.runtime<never>()
    const runPromise = Runtime.runPromise(runtime)
    const runFork = Runtime.runFork(runtime)
    // The S3 SDK is loaded only for a bucket (src/recording/S3Bucket.ts).
    const bucket: Option.Option<S3Bucket> = yield* Effect.transposeMapOption(settings.s3, (s3) =>
      Effect.map(Effect.promise(() => import("./S3Bucket.js")), ({ S3Bucket }) => new S3Bucket(s3.location, s3.credentials))
    )
    const embedded = Option.isNone(config.redisUrl)

    const writes = counterOn(metrics.registry, "callgate_recording_writes_total", "Audio writes to recording files (one system call each)")
    const dropped = counterOn(metrics.registry, "callgate_recording_dropped_frames_total", "Frames (or parts) not recorded: late, too long, or beyond the agent's playout queue")
    const finished = counterOn(metrics.registry, "callgate_recordings_finished_total", "Recordings finished, by how: ended (the call ended), recovered (left by a crash), failed", ["how"])
    const live = new Map<string, Live>()
    let writeTotal = 0
    sampledGaugeOn(metrics.registry, "callgate_recordings_active", "Calls being recorded on this instance", () => {
      let count = 0
      for (const entry of live.values()) if (entry.fd !== undefined) count++
      return count
    })

    /** The last `recording` mode seen per environment: "off" calls get no window until the read says otherwise. */
    const modes = new Map<string, RecordingMode>()
    const pool: Array<Buffer> = []
    const take = (bytes: number): Buffer => (bytes <= POOL_BUFFER_BYTES ? (pool.pop() ?? Buffer.allocUnsafeSlow(POOL_BUFFER_BYTES)) : Buffer.allocUnsafe(bytes))
    const release = (buffer: Buffer) => {
      if (buffer.length === POOL_BUFFER_BYTES && pool.length < MAX_POOLED) pool.push(buffer)
    }
    const logError = (message: string, details: Record<string, unknown>) => runFork(Effect.logError(message, details))

    const urlOf = (agentId: string, sessionId: string) => `${publicUrl.current()}/v1/agents/${agentId}/sessions/${sessionId}/recording`

    const metaOf = (
      entry: Live,
      state: RecordingMeta["state"],
      durationMs: number | null,
      pauses: ReadonlyArray<RecordingPause>,
      callerEndMs?: number
    ): RecordingMeta => ({
      sessionId: entry.info.sessionId,
      agentId: entry.info.agentId,
      environmentId: entry.info.environmentId,
      instanceId,
      startedAt: entry.startedAt,
      state,
      durationMs,
      pauses,
      ...(entry.part !== undefined ? { part: entry.part } : {}),
      partStartedAtMs: entry.partStartedAtMs,
      sampleRate: entry.leg.recording?.sampleRate ?? entry.info.mediaFormat?.sampleRate ?? 8000,
      ...(callerEndMs !== undefined ? { callerEndMs } : {})
    })

    /** Chained after the previous sidecar write; rejects when this one fails (logged once here). */
    const saveMeta = (entry: Live, meta: RecordingMeta): Promise<void> => {
      const written = entry.metaWrite.then(() => writeMeta(entry.paths.meta, meta))
      entry.metaWrite = written.catch((error) => {
        logError("could not write a recording's metadata", { sessionId: entry.info.sessionId, error: String(error) })
      })
      return written
    }

    /** One positional write of flushed audio; the call stops being recorded if the disk refuses it. */
    const write = (entry: Live, out: FlushedAudio): Promise<void> => {
      const fd = entry.fd!
      writes.inc()
      writeTotal++
      const done = new Promise<void>((resolve) => {
        writeFd(fd, out.bytes, 0, out.length, HEADER_BYTES + out.at * FRAME_BYTES, (error) => {
          release(out.bytes)
          if (error !== null) {
            entry.failed = true
            entry.leg.recording = undefined
            finished.inc({ how: "failed" })
            logError("a recording write failed; the call is no longer recorded", { sessionId: entry.info.sessionId, error: error.message })
          }
          resolve()
        })
      })
      entry.inflight = done
      void done.then(() => {
        if (entry.inflight === done) entry.inflight = undefined
      })
      return done
    }

    /** The shared ticker: each recording that has not been flushed for a second gets one write. */
    const tick = () => {
      const now = performance.now()
      for (const entry of live.values()) {
        const recording = entry.leg.recording
        if (recording === undefined || entry.fd === undefined || entry.inflight !== undefined || entry.finishing) continue
        if (now - recording.lastFlushAt < FLUSH_EVERY_MS) continue
        const before = recording.droppedFrames
        const out = recording.flush(take)
        if (recording.droppedFrames > before) dropped.inc(recording.droppedFrames - before)
        if (recording.metadataChanged) {
          recording.metadataChanged = false
          saveMeta(entry, metaOf(entry, "recording", null, recording.pauses.map((pause) => ({ ...pause })))).catch(() => {})
        }
        if (out !== undefined) void write(entry, out)
      }
    }
    // Only while a call is being recorded: with recording off (or no recorded call) nothing wakes the process.
    const ticker = yield* idleTicker({ interval: TICK, busy: () => live.size > 0, tick: Effect.sync(tick) })

    const makeDir = (path: string) =>
      new Promise<void>((resolve, reject) => mkdir(dirname(path), { recursive: true }, (error) => (error !== null ? reject(error) : resolve())))

    const openFile = (path: string, sampleRate: number) =>
      new Promise<number>((resolve, reject) =>
        openFd(path, "w", 0o640, (openError, fd) => {
          if (openError !== null) return reject(openError)
          writeFd(fd, wavHeader(PROVISIONAL_SIZE, sampleRate), 0, HEADER_BYTES, 0, (writeError) => (writeError !== null ? reject(writeError) : resolve(fd)))
        })
      )

    /** A call's recording; paused from its first sample when the call moved here while its agent had the recording paused. */
    const newRecording = (info: SessionInfo): CallRecording => {
      const recording = new CallRecording(info.mediaFormat)
      if (info.resumed?.recordingPaused === true) recording.pause(true)
      return recording
    }

    /**
     * The environment's mode (as the call's admission read it, else read now); an "on" call gets
     * its file (header with provisional sizes) and sidecar.
     */
    const decide = async (entry: Live): Promise<boolean> => {
      const { info } = entry
      const key = `${info.agentId}/${info.environmentId}`
      const mode =
        info.recording ??
        (await runPromise(
          environments.stored(info.agentId, info.environmentId).pipe(
            Effect.map((env): RecordingMode => env.recording ?? "off"),
            Effect.catchAll(() => Effect.succeed<RecordingMode | undefined>(undefined))
          )
        ))
      if (mode !== undefined) modes.set(key, mode)
      if (mode !== "on") {
        entry.leg.recording = undefined
        if (live.get(info.sessionId) === entry) live.delete(info.sessionId)
        return false
      }
      const recording = (entry.leg.recording ??= newRecording(info))
      try {
        // The sidecar first: a file a crash leaves is always found by its sidecar.
        await makeDir(entry.paths.meta)
        await saveMeta(entry, metaOf(entry, "recording", null, []))
        entry.fd = await openFile(entry.paths.wav, recording.sampleRate)
        return true
      } catch (error) {
        entry.leg.recording = undefined
        if (live.get(info.sessionId) === entry) live.delete(info.sessionId)
        finished.inc({ how: "failed" })
        logError("could not start a call's recording; the call goes on unrecorded", { sessionId: info.sessionId, error: String(error) })
        return false
      }
    }

    /**
     * The recorder's hook at the opening of a session (synchronous): the carrier leg the session is
     * to use. A call its admission found not recorded keeps its carrier leg as it is: nothing per
     * frame, nothing kept. Otherwise the call's audio is kept from its first frame while its file is
     * opened (and, for a stream that came without the admission's word, the environment is read,
     * unless it was last seen with recording off).
     */
    const tap = (info: SessionInfo, carrier: CarrierLeg): CarrierLeg => {
      if (info.recording === "off") {
        modes.set(`${info.agentId}/${info.environmentId}`, "off")
        return carrier
      }
      const leg = new RecordingLeg(carrier)
      if (info.recording === "on" || modes.get(`${info.agentId}/${info.environmentId}`) !== "off") leg.recording = newRecording(info)
      // A stream the call was moved to (resumed) is a part of its own: it never overwrites the earlier parts.
      const partStartedAtMs = clock.unsafeCurrentTimeMillis()
      const part = info.resumed === undefined ? undefined : `${partStartedAtMs}-${randomBytes(3).toString("hex")}`
      const stem = stemOf(info.sessionId, part)
      const entry: Live = {
        info,
        leg,
        paths: pathsOf(settings.dir, info.agentId, stem),
        startedAt: info.createdAt.toISOString(),
        part,
        stem,
        partStartedAtMs,
        decided: Promise.resolve(false),
        fd: undefined,
        inflight: undefined,
        metaWrite: Promise.resolve(),
        finishing: false,
        failed: false
      }
      if (live.size === 0) ticker.wake()
      live.set(info.sessionId, entry)
      // Never rejects: a failure to decide (the runtime shutting down) leaves the call unrecorded.
      entry.decided = decide(entry).catch(() => {
        entry.leg.recording = undefined
        if (live.get(info.sessionId) === entry) live.delete(info.sessionId)
        return false
      })
      return leg
    }

    const upload = async (meta: RecordingMeta, paths: RecordingPaths, s3: S3Bucket) => {
      const names = objectNamesOf(meta.agentId, stemOf(meta.sessionId, meta.part))
      await s3.uploadFile(names.wav, paths.wav, "audio/wav")
      await s3.putJson(names.meta, { ...meta, uploaded: true })
      await removeLocal(paths)
    }

    const uploadBounded = (meta: RecordingMeta, paths: RecordingPaths) =>
      Option.match(bucket, {
        onNone: () => Effect.void,
        onSome: (s3) =>
          Effect.tryPromise(() => upload(meta, paths, s3)).pipe(
            Effect.timeoutFail({ duration: UPLOAD_WAIT, onTimeout: () => new Error("the upload took too long") }),
            Effect.catchAll((error) =>
              Effect.logWarning("a recording could not be uploaded yet; the sweep retries it", { sessionId: meta.sessionId, error: String(error) })
            )
          )
      })

    /** Ends the call's recording (this stream's part): the last audio written, the header's sizes set, the sidecar complete. */
    const complete = async (entry: Live): Promise<{ readonly meta: RecordingMeta; readonly summary: RecordingSummary } | undefined> => {
      const on = await entry.decided
      const recording = entry.leg.recording
      if (!on || entry.finishing) return undefined
      entry.finishing = true
      entry.leg.recording = undefined
      try {
        await entry.inflight
        if (entry.failed || recording === undefined) {
          if (entry.fd !== undefined) closeFd(entry.fd, () => {})
          entry.fd = undefined
          return undefined
        }
        const out = recording.flush((bytes) => Buffer.allocUnsafe(bytes), true)
        if (out !== undefined) await write(entry, out)
        if (recording.droppedFrames > 0) dropped.inc(recording.droppedFrames)
        const fd = entry.fd!
        entry.fd = undefined
        await new Promise<void>((resolve) => closeFd(fd, () => resolve()))
        if (entry.failed) return undefined
        const durationMs = await finishWav(entry.paths.wav, recording.end * FRAME_BYTES)
        const pauses = closedPauses(recording.pauses, durationMs)
        const meta = metaOf(entry, "complete", durationMs, pauses, Math.round((recording.callerEnd * 1000) / recording.sampleRate))
        await saveMeta(entry, meta)
        finished.inc({ how: "ended" })
        return { meta, summary: { url: urlOf(entry.info.agentId, entry.info.sessionId), durationMs, pauses } }
      } finally {
        if (live.get(entry.info.sessionId) === entry) live.delete(entry.info.sessionId)
      }
    }

    const unavailable = (error: unknown) => new RecordingUnavailable({ message: `the recordings could not be read: ${String(error)}` })

    /**
     * The finished parts of a session's recording: this instance's RECORDINGS_DIR first (the parts
     * written here, or by any instance on a shared one), then the bucket for the others; and whether
     * a part is still being written there (the call goes on elsewhere, or a crash left it).
     */
    const partsOf = async (agentId: string, sessionId: string): Promise<{ readonly parts: Array<StoredPart>; readonly inProgress: boolean }> => {
      const parts: Array<StoredPart> = []
      const stems = new Set<string>()
      let inProgress = false
      for (const found of await listSessionParts(settings.dir, agentId, sessionId)) {
        if (found.meta.state === "recording") {
          inProgress = true
          continue
        }
        // A sidecar without its WAV: the upload is removing the local copy (the bucket has it).
        if (found.wavBytes === undefined) continue
        stems.add(stemOf(sessionId, found.meta.part))
        parts.push({ meta: found.meta, fileBytes: found.wavBytes, source: { disk: found.paths.wav } })
      }
      if (Option.isSome(bucket)) {
        const objects = await bucket.value.list(`${agentId}/${sessionId}.`)
        const sizes = new Map(objects.map((object) => [object.name, object.size]))
        for (const object of objects) {
          const name = object.name.slice(agentId.length + 1)
          if (!isPartFile(name, sessionId, ".json")) continue
          const stem = name.slice(0, -".json".length)
          const wav = objectNamesOf(agentId, stem).wav
          const size = sizes.get(wav)
          if (stems.has(stem) || size === undefined) continue
          const meta = (await bucket.value.getJson(object.name)) as RecordingMeta | undefined
          if (meta === undefined || typeof meta !== "object" || meta.agentId !== agentId || meta.sessionId !== sessionId) continue
          parts.push({ meta, fileBytes: size, source: { object: wav } })
        }
      }
      return { parts, inProgress }
    }

    /** Bytes [start, end] (inclusive) of a part's file. */
    const openPart = async (part: StoredPart, start: number, end: number): Promise<Readable> => {
      if ("disk" in part.source) return createReadStream(part.source.disk, { start, end })
      const object = await Option.getOrThrow(bucket).read(part.source.object, start, end, part.fileBytes)
      if (object === undefined) throw new Error(`the recording's part ${part.source.object} is gone`)
      return object.body
    }

    /** A part's sample rate: its sidecar's, or (recordings made before parts) its header's. */
    const rateOf = async (part: StoredPart): Promise<number> => {
      if (part.meta.sampleRate !== undefined) return part.meta.sampleRate
      if ("disk" in part.source) {
        const handle = await openHandle(part.source.disk, "r")
        try {
          return sampleRateOf((await handle.read(Buffer.alloc(HEADER_BYTES), 0, HEADER_BYTES, 0)).buffer)
        } finally {
          await handle.close()
        }
      }
      const chunks: Array<Buffer> = []
      for await (const chunk of await openPart(part, 0, HEADER_BYTES - 1)) chunks.push(Buffer.from(chunk as Uint8Array))
      return sampleRateOf(Buffer.concat(chunks))
    }

    /** The parts laid on one timeline (RecordingJoin). */
    const join = async (sessionId: string, parts: ReadonlyArray<StoredPart>): Promise<JoinedRecording> => {
      const rates = await Promise.all(parts.map(rateOf))
      const joined = joinParts(
        parts.map((part, index) => ({
          startedAtMs: part.meta.partStartedAtMs ?? Date.parse(part.meta.startedAt),
          callerEndMs: part.meta.callerEndMs,
          dataBytes: dataBytesOf(part.fileBytes),
          sampleRate: rates[index]!,
          pauses: part.meta.pauses
        }))
      )
      if (joined.skipped.length > 0) {
        logError("a part of a recording has another sample rate than the first and is left out of it", { sessionId, parts: joined.skipped.length })
      }
      return joined
    }

    /**
     * The summary of a moved call's whole recording, given by the instance that ends it: the
     * earlier parts are waited for (a few seconds at most) until they are finished and visible
     * here (on a shared RECORDINGS_DIR, or in the bucket once uploaded). None while one is still
     * being written after that (the recording is served through /v1 once it is finished).
     */
    const wholeSummary = (agentId: string, sessionId: string): Effect.Effect<RecordingSummary | undefined> =>
      Effect.gen(function* () {
        for (let tries = 1; ; tries++) {
          const found = yield* Effect.tryPromise(() => partsOf(agentId, sessionId))
          if ((!found.inProgress && found.parts.length > 1) || tries >= JOIN_WAIT_TRIES) {
            if (found.inProgress || found.parts.length === 0) {
              yield* Effect.logWarning("an earlier part of the moved call's recording is not finished yet; session.ended goes without the recording", {
                sessionId
              })
              return undefined
            }
            const joined = yield* Effect.tryPromise(() => join(sessionId, found.parts))
            return { url: urlOf(agentId, sessionId), durationMs: joined.durationMs, pauses: joined.pauses }
          }
          yield* Effect.sleep(JOIN_WAIT_STEP)
        }
      }).pipe(
        Effect.catchAll((error) =>
          Effect.as(Effect.logWarning("the moved call's recording could not be summed up", { sessionId, error: String(error) }), undefined)
        )
      )

    /**
     * The call ended: its recording is finished (and uploaded, waiting UPLOAD_WAIT at most); what
     * the session's record and `session.ended` say about it. None when the call was not recorded.
     */
    const finish = (sessionId: string): Effect.Effect<Option.Option<RecordingSummary>> =>
      Effect.suspend(() => {
        const entry = live.get(sessionId)
        if (entry === undefined) return Effect.succeed(Option.none())
        return Effect.tryPromise(() => complete(entry)).pipe(
          Effect.tap((done) => (done === undefined ? Effect.void : uploadBounded(done.meta, entry.paths))),
          // A stream the call was moved to: the summary is the whole recording's, its parts joined.
          Effect.flatMap((done) =>
            done === undefined || entry.part === undefined ? Effect.succeed(done?.summary) : wholeSummary(entry.info.agentId, entry.info.sessionId)
          ),
          Effect.map(Option.fromNullable),
          Effect.catchAll((error) =>
            Effect.as(Effect.logError("a call's recording could not be finished", { sessionId, error: String(error.cause ?? error) }), Option.none())
          )
        )
      })

    /** A recording a crash left "recording": its header set from what was written, its open pause closed at the end. */
    const recover = async (meta: RecordingMeta, paths: RecordingPaths): Promise<RecordingMeta> => {
      const durationMs = await finishWav(paths.wav)
      const recovered: RecordingMeta = { ...meta, state: "complete", durationMs, pauses: closedPauses(meta.pauses, durationMs) }
      await writeMeta(paths.meta, recovered)
      finished.inc({ how: "recovered" })
      return recovered
    }

    /**
     * The sweep (at start, then every RECORDINGS_SWEEP_INTERVAL_MS): finishes recordings a crash
     * left (this instance's previous run's at start; any instance's whose file has not changed for
     * a minute), uploads what has not reached the bucket, deletes what is past the retention.
     */
    const sweep = (atStart: boolean) =>
      Effect.tryPromise(async () => {
        const now = clock.unsafeCurrentTimeMillis()
        const cutoff = Option.map(settings.retentionDays, (days) => now - days * 86_400_000)
        for (const found of await listRecordings(settings.dir)) {
          let meta = found.meta
          if (live.get(meta.sessionId)?.stem === stemOf(meta.sessionId, meta.part)) continue
          if (meta.state === "recording") {
            const mine = atStart && (meta.instanceId === instanceId || embedded)
            const abandoned = found.wavChangedAt === undefined || now - found.wavChangedAt > ABANDONED_AFTER_MS
            if (!mine && !abandoned) continue
            if (found.wavChangedAt === undefined) {
              await removeLocal(found.paths)
              continue
            }
            meta = await recover(meta, found.paths)
          }
          if (Option.isSome(cutoff) && Date.parse(meta.startedAt) < cutoff.value) {
            await removeLocal(found.paths)
            continue
          }
          if (Option.isSome(bucket) && meta.uploaded !== true) await upload(meta, found.paths, bucket.value)
        }
        if (Option.isSome(bucket) && Option.isSome(cutoff)) {
          const old = (await bucket.value.list()).filter((object) => object.lastModified.getTime() < cutoff.value).map((object) => object.name)
          for (let i = 0; i < old.length; i += 1000) await bucket.value.remove(old.slice(i, i + 1000))
        }
      }).pipe(Effect.catchAll((error) => Effect.logError("the recordings sweep failed", { error: String(error.cause ?? error) })))

    yield* sweep(true).pipe(
      Effect.zipRight(sweep(false).pipe(Effect.delay(Duration.millis(settings.sweepIntervalMs)), Effect.forever)),
      Effect.forkScoped
    )

    // At shutdown, recordings still open are finished (the drain ends calls first; these were cut).
    yield* Effect.addFinalizer(() =>
      Effect.forEach([...live.values()], (entry) => Effect.ignore(Effect.tryPromise(() => complete(entry))), { discard: true }).pipe(
        Effect.zipRight(Effect.sync(() => Option.map(bucket, (s3) => s3.close())))
      )
    )

    /** The recording's bytes (the whole file, or one range of it): its parts joined, read from disk or the bucket as they are streamed. */
    const read = (agentId: string, sessionId: string, rangeHeader: string | undefined) =>
      Effect.gen(function* () {
        const running = live.get(sessionId)
        if (running !== undefined && running.info.agentId === agentId && (yield* Effect.promise(() => running.decided))) {
          return yield* Effect.fail(new RecordingInProgress({ agentId, sessionId }))
        }
        const found = yield* Effect.tryPromise({ try: () => partsOf(agentId, sessionId), catch: unavailable })
        if (found.inProgress) return yield* Effect.fail(new RecordingInProgress({ agentId, sessionId }))
        if (found.parts.length === 0) return yield* Effect.fail(new RecordingNotFound({ agentId, sessionId }))
        const joined = yield* Effect.tryPromise({ try: () => join(sessionId, found.parts), catch: unavailable })
        const size = HEADER_BYTES + joined.dataBytes
        let range: { start: number; end: number } | undefined
        if (rangeHeader !== undefined) {
          const parsed = parseRange(size, rangeHeader, { combine: true })
          if (parsed === -1) return yield* Effect.fail(new RangeNotSatisfiable({ size }))
          // A malformed header (-2) or a unit other than bytes is ignored: the whole file is served (RFC 9110).
          if (parsed !== -2 && parsed.type === "bytes" && parsed.length === 1) range = { start: parsed[0]!.start, end: parsed[0]!.end }
        }
        const start = range?.start ?? 0
        const end = range?.end ?? size - 1
        const body = streamJoined(joined, start, end, (part, from, to) => openPart(found.parts[part]!, from, to))
        const download: RecordingDownload = { body, size, range }
        return download
      })

    /** Deletes the recording, every part of it (disk and bucket). */
    const remove = (agentId: string, sessionId: string) =>
      Effect.gen(function* () {
        if (live.has(sessionId) && live.get(sessionId)!.info.agentId === agentId) {
          return yield* Effect.fail(new RecordingInProgress({ agentId, sessionId }))
        }
        const local = yield* Effect.promise(() => listSessionParts(settings.dir, agentId, sessionId))
        yield* Effect.promise(() => Promise.all(local.map((found) => removeLocal(found.paths))))
        let existed = local.length > 0
        if (Option.isSome(bucket)) {
          const inBucket = yield* Effect.tryPromise({
            try: async () => {
              const names = (await bucket.value.list(`${agentId}/${sessionId}.`))
                .map((object) => object.name)
                .filter((name) => {
                  const file = name.slice(agentId.length + 1)
                  return isPartFile(file, sessionId, ".wav") || isPartFile(file, sessionId, ".json")
                })
              for (let i = 0; i < names.length; i += 1000) await bucket.value.remove(names.slice(i, i + 1000))
              return names.length > 0
            },
            catch: (error) => new RecordingUnavailable({ message: `the recordings bucket did not answer: ${String(error)}` })
          })
          existed ||= inBucket
        }
        if (!existed) return yield* Effect.fail(new RecordingNotFound({ agentId, sessionId }))
      })


    return {
      tap,
      finish,
      read,
      remove,
      /** Runs the sweep now (tests; it also runs at start and every RECORDINGS_SWEEP_INTERVAL_MS). */
      sweep: sweep(false),
      /** Audio writes so far (the bench's write count). */
      writeCount: (): number => writeTotal
    } as const
  })
}) {}
