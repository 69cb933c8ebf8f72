import { join } from "node:path"
import { Config, ConfigError, Effect, Either, Option } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { parseS3Url, type S3Credentials, type S3Location } from "./S3Location.js"

/** Recording's settings (docs/recording.md, "Settings"), read with the feature. */
export interface RecordingSettings {
  /** Where recordings are written while calls run (and kept, without a bucket). */
  readonly dir: string
  /** The bucket finished recordings go to, when RECORDINGS_S3_URL is set. */
  readonly s3: Option.Option<{ readonly location: S3Location; readonly credentials: S3Credentials }>
  /** Recordings older than this many days are deleted by the sweep; none when unset. */
  readonly retentionDays: Option.Option<number>
  /** How often the sweep runs (retention, unfinished files of lost instances, uploads that failed). */
  readonly sweepIntervalMs: number
}

const optionalString = (name: string) => Config.option(Config.string(name).pipe(Config.map((text) => text.trim()))).pipe(
  Config.map(Option.filter((text) => text.length > 0))
)

export const readRecordingSettings = Effect.gen(function* () {
  const app = yield* AppConfig
  const given = yield* Config.all({
    dir: optionalString("RECORDINGS_DIR"),
    s3Url: optionalString("RECORDINGS_S3_URL"),
    retentionDays: Config.option(
      Config.integer("RECORDINGS_RETENTION_DAYS").pipe(
        Config.mapOrFail((days) => (days >= 1 ? Either.right(days) : Either.left(ConfigError.InvalidData([], "must be a whole number of days, at least 1"))))
      )
    ),
    sweepIntervalMs: Config.integer("RECORDINGS_SWEEP_INTERVAL_MS").pipe(
      Config.withDefault(600_000),
      Config.mapOrFail((ms) => (ms >= 100 ? Either.right(ms) : Either.left(ConfigError.InvalidData([], "must be at least 100"))))
    ),
    region: optionalString("AWS_REGION"),
    accessKeyId: optionalString("AWS_ACCESS_KEY_ID"),
    secretAccessKey: optionalString("AWS_SECRET_ACCESS_KEY"),
    sessionToken: optionalString("AWS_SESSION_TOKEN")
  })
  let s3: RecordingSettings["s3"] = Option.none()
  if (Option.isSome(given.s3Url)) {
    const location = parseS3Url(given.s3Url.value)
    if (typeof location === "string") return yield* Effect.fail(ConfigError.InvalidData(["RECORDINGS_S3_URL"], location))
    s3 = Option.some({
      location,
      credentials: {
        region: Option.getOrElse(given.region, () => "us-east-1"),
        accessKeyId: Option.getOrUndefined(given.accessKeyId),
        secretAccessKey: Option.getOrUndefined(given.secretAccessKey),
        sessionToken: Option.getOrUndefined(given.sessionToken)
      }
    })
  }
  const settings: RecordingSettings = {
    dir: Option.getOrElse(given.dir, () => join(app.dataDir, "recordings")),
    s3,
    retentionDays: given.retentionDays,
    sweepIntervalMs: given.sweepIntervalMs
  }
  return settings
})
