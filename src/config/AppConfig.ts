import { Config, ConfigError, Duration, Effect, Either, Option, Redacted } from "effect"
import { defaults } from "../../config/defaults.js"

/** Like Config.validate, but the failure names the variable (Config.validate's path is empty). */
const check = <A>(name: string, message: string, ok: (value: A) => boolean) =>
  Config.mapOrFail((value: A) => (ok(value) ? Either.right(value) : Either.left(ConfigError.InvalidData([name], message))))

/** "500ms", "5s", "5m", "2h", "1d", or bare seconds. */
export const parseDuration = (text: string): Option.Option<Duration.Duration> => {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(text)
  if (!match) return Option.none()
  const value = Number(match[1])
  const unit = match[2] ?? "s"
  const millis = value * { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[unit]!
  return Option.some(Duration.millis(millis))
}

const duration = (name: keyof typeof defaults) =>
  Config.string(name).pipe(
    Config.withDefault(String(defaults[name])),
    Config.mapOrFail((text) =>
      Option.match(parseDuration(text), {
        onNone: () => Either.left(ConfigError.InvalidData([name], `expected a duration such as 10s, 5m or 2h, got "${text}"`)),
        onSome: Either.right
      })
    )
  )

const durationList = (name: keyof typeof defaults) =>
  Config.string(name).pipe(
    Config.withDefault(String(defaults[name])),
    Config.mapOrFail((text) => {
      const parts = text.split(",").map((part) => part.trim()).filter((part) => part.length > 0)
      const parsed = parts.map(parseDuration)
      if (parts.length === 0 || parsed.some(Option.isNone)) {
        return Either.left(ConfigError.InvalidData([name], `expected a comma-separated list of durations such as 5s,5m,2h, got "${text}"`))
      }
      return Either.right(parsed.map((d) => Option.getOrThrow(d)))
    })
  )

const httpUrl = (name: keyof typeof defaults) =>
  Config.string(name).pipe(
    Config.withDefault(String(defaults[name])),
    check(name, "expected an http:// or https:// URL", (text: string) => {
      try {
        const url = new URL(text)
        return url.protocol === "http:" || url.protocol === "https:"
      } catch {
        return false
      }
    }),
    Config.map((text) => text.replace(/\/+$/, ""))
  )

const optionalSecret = (name: string) => Config.option(Config.redacted(name))

/** A 32-byte AES key, given as 64 hex characters or base64. */
const secretsKey = Config.option(
  Config.redacted("SECRETS_KEY").pipe(
    Config.mapOrFail((value) => {
      const text = Redacted.value(value).trim()
      const bytes = /^[0-9a-fA-F]{64}$/.test(text) ? Buffer.from(text, "hex") : Buffer.from(text, "base64")
      return bytes.length === 32
        ? Either.right(Redacted.make(bytes))
        : Either.left(ConfigError.InvalidData(["SECRETS_KEY"], "expected 32 bytes, as 64 hex characters or base64 (openssl rand -base64 32)"))
    })
  )
)

const logLevels = ["trace", "debug", "info", "warn", "error", "fatal", "none"] as const
export type LogLevelName = (typeof logLevels)[number]

const settings = Config.all({
  port: Config.port("PORT").pipe(Config.withDefault(defaults.PORT)),
  host: Config.string("HOST").pipe(Config.withDefault(defaults.HOST)),
  publicUrl: httpUrl("PUBLIC_URL"),
  logLevel: Config.literal(...logLevels)("LOG_LEVEL").pipe(Config.withDefault(defaults.LOG_LEVEL)),
  redisUrl: Config.option(
    Config.redacted("REDIS_URL").pipe(
      check("REDIS_URL", "expected a redis:// or rediss:// URL", (value: Redacted.Redacted) => /^rediss?:\/\//.test(Redacted.value(value)))
    )
  ),
  adminApiKey: Config.redacted("ADMIN_API_KEY").pipe(
    check("ADMIN_API_KEY", "must be at least 16 characters", (value: Redacted.Redacted) => Redacted.value(value).length >= 16)
  ),
  secretsKey,
  twilioAccountSid: Config.option(Config.string("TWILIO_ACCOUNT_SID")),
  twilioAuthToken: optionalSecret("TWILIO_AUTH_TOKEN"),
  twilioApiBaseUrl: httpUrl("TWILIO_API_BASE_URL"),
  telnyxApiKey: optionalSecret("TELNYX_API_KEY"),
  telnyxApiBaseUrl: httpUrl("TELNYX_API_BASE_URL"),
  telnyxPublicKey: Config.option(Config.string("TELNYX_PUBLIC_KEY")),
  carrierRequestTimeout: duration("CARRIER_REQUEST_TIMEOUT"),
  webhookRetrySchedule: durationList("WEBHOOK_RETRY_SCHEDULE"),
  webhookTimeout: duration("WEBHOOK_TIMEOUT"),
  fallbackWebhookTimeout: duration("FALLBACK_WEBHOOK_TIMEOUT"),
  webhookAllowPrivateNetworks: Config.boolean("WEBHOOK_ALLOW_PRIVATE_NETWORKS").pipe(
    Config.withDefault(defaults.WEBHOOK_ALLOW_PRIVATE_NETWORKS)
  ),
  /** Extra CA certificates (PEM file) trusted for webhook destinations, beside the system roots. */
  webhookCaFile: Config.option(Config.string("WEBHOOK_CA_FILE")),
  webhookConcurrency: Config.integer("WEBHOOK_CONCURRENCY").pipe(
    Config.withDefault(defaults.WEBHOOK_CONCURRENCY),
    check("WEBHOOK_CONCURRENCY", "must be an integer from 1 to 4096", (n: number) => n >= 1 && n <= 4096)
  ),
  webhookConcurrencyPerHost: Config.integer("WEBHOOK_CONCURRENCY_PER_HOST").pipe(
    Config.withDefault(defaults.WEBHOOK_CONCURRENCY_PER_HOST),
    check("WEBHOOK_CONCURRENCY_PER_HOST", "must be an integer from 1 to 4096", (n: number) => n >= 1 && n <= 4096)
  ),
  httpBodyLimitBytes: Config.integer("HTTP_BODY_LIMIT_BYTES").pipe(
    Config.withDefault(defaults.HTTP_BODY_LIMIT_BYTES),
    check("HTTP_BODY_LIMIT_BYTES", "must be between 1024 and 10485760", (n: number) => n >= 1024 && n <= 10_485_760)
  ),
  shutdownDrainTimeout: duration("SHUTDOWN_DRAIN_TIMEOUT"),
  sessionMaxDuration: duration("SESSION_MAX_DURATION"),
  sessionRetention: duration("SESSION_RETENTION"),
  agentConnectTimeout: duration("AGENT_CONNECT_TIMEOUT"),
  agentPingInterval: duration("AGENT_PING_INTERVAL"),
  rateLimitPerMinute: Config.integer("RATE_LIMIT_PER_MINUTE").pipe(
    Config.withDefault(defaults.RATE_LIMIT_PER_MINUTE),
    check("RATE_LIMIT_PER_MINUTE", "must be an integer from 0 (no limit) to 1000000", (n: number) => n >= 0 && n <= 1_000_000)
  ),
  vadMode: Config.integer("VAD_MODE").pipe(
    Config.withDefault(defaults.VAD_MODE),
    check("VAD_MODE", "must be an integer from 0 to 3", (n: number) => n >= 0 && n <= 3)
  ),
  vadMinSpeechMs: Config.integer("VAD_MIN_SPEECH_MS").pipe(
    Config.withDefault(defaults.VAD_MIN_SPEECH_MS),
    check("VAD_MIN_SPEECH_MS", "must be an integer from 20 to 2000", (n: number) => n >= 20 && n <= 2000)
  ),
  vadAgentMinSpeechMs: Config.integer("VAD_AGENT_MIN_SPEECH_MS").pipe(
    Config.withDefault(defaults.VAD_AGENT_MIN_SPEECH_MS),
    check("VAD_AGENT_MIN_SPEECH_MS", "must be an integer from 20 to 1000", (n: number) => n >= 20 && n <= 1000)
  ),
  turnEndSilenceMs: Config.integer("TURN_END_SILENCE_MS").pipe(
    Config.withDefault(defaults.TURN_END_SILENCE_MS),
    check("TURN_END_SILENCE_MS", "must be an integer from 100 to 5000", (n: number) => n >= 100 && n <= 5000)
  ),
  breakerStoreTimeout: duration("BREAKER_STORE_TIMEOUT")
})

export type Settings = Config.Config.Success<typeof settings>

/** Cross-field rules that a single variable's validation cannot express. */
const checkCombination = (s: Settings): Either.Either<Settings, ConfigError.ConfigError> => {
  if (Option.isSome(s.redisUrl) && Option.isNone(s.secretsKey)) {
    return Either.left(
      ConfigError.MissingData(["SECRETS_KEY"], "is required when REDIS_URL is set (secrets at rest are encrypted with it)")
    )
  }
  return Either.right(s)
}

export class AppConfig extends Effect.Service<AppConfig>()("callgate/AppConfig", {
  effect: Effect.flatMap(settings, (s) => Either.match(checkCombination(s), { onLeft: Effect.fail, onRight: Effect.succeed }))
}) {}

/**
 * One line naming the variable and what is wrong, for the start-up failure message.
 * Effect's own rendering nests And/Or trees; operators want the first concrete problem.
 */
export const describeConfigError = (error: ConfigError.ConfigError): string => {
  const lines: Array<string> = []
  const walk = (e: ConfigError.ConfigError): void => {
    switch (e._op) {
      case "And":
      case "Or":
        walk(e.left)
        walk(e.right)
        return
      case "MissingData":
        // Effect's own text for a missing variable may be masked for redacted settings.
        lines.push(`${e.path.join(".")}: ${e.message.startsWith("is required") ? e.message : "is required but not set"}`)
        return
      case "InvalidData":
      case "SourceUnavailable":
      case "Unsupported":
        lines.push(`${e.path.join(".")}: ${e.message}`)
        return
    }
  }
  walk(error)
  return `invalid configuration: ${[...new Set(lines)].join("; ")}`
}
