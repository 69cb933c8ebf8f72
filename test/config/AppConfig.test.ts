import { ConfigError, ConfigProvider, Duration, Effect, Exit, Layer, Option, Redacted } from "effect"
import { describe, expect, it } from "vitest"
import { defaults } from "../../config/defaults.js"
import { AppConfig, describeConfigError, parseDuration } from "../../src/config/AppConfig.js"

const ADMIN = "an-admin-key-long-enough"

/** Reads AppConfig from exactly `env` (no process environment). */
const load = (env: Record<string, string>) =>
  Effect.runPromiseExit(
    AppConfig.pipe(
      Effect.provide(AppConfig.Default),
      Effect.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
    )
  )

/** The start-up line for `env`, which must fail. */
const failureLine = async (env: Record<string, string>) => {
  const exit = await load(env)
  if (Exit.isSuccess(exit)) throw new Error(`expected ${JSON.stringify(env)} to be refused`)
  const failure = exit.cause._tag === "Fail" ? exit.cause.error : undefined
  expect(ConfigError.isConfigError(failure)).toBe(true)
  return describeConfigError(failure as ConfigError.ConfigError)
}

describe("AppConfig", () => {
  it("reads the defaults from config/defaults.ts with only ADMIN_API_KEY set", async () => {
    const exit = await load({ ADMIN_API_KEY: ADMIN })
    expect(Exit.isSuccess(exit)).toBe(true)
    const config = (exit as Exit.Success<AppConfig, never>).value
    expect(config.port).toBe(defaults.PORT)
    expect(config.host).toBe(defaults.HOST)
    expect(config.publicUrl).toBe("http://127.0.0.1:8080")
    expect(Option.isNone(config.publicUrlSetting)).toBe(true)
    expect(config.logLevel).toBe(defaults.LOG_LEVEL)
    expect(Option.isNone(config.redisUrl)).toBe(true)
    expect(Option.isNone(config.secretsKey)).toBe(true)
    expect(Redacted.value(config.adminApiKey)).toBe(ADMIN)
    expect(config.twilioApiBaseUrl).toBe(defaults.TWILIO_API_BASE_URL)
    expect(config.telnyxApiBaseUrl).toBe(defaults.TELNYX_API_BASE_URL)
    expect(config.webhookRetrySchedule.map(Duration.toMillis)).toEqual(
      [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 50_400_000, 72_000_000, 86_400_000]
    )
    expect(Duration.toMillis(config.webhookTimeout)).toBe(10_000)
    expect(config.webhookAllowPrivateNetworks).toBe(false)
    expect(config.httpBodyLimitBytes).toBe(65_536)
    expect(config.rateLimitPerMinute).toBe(defaults.RATE_LIMIT_PER_MINUTE)
    expect(Duration.toMillis(config.shutdownDrainTimeout)).toBe(30_000)
    expect(Duration.toMillis(config.instanceTtl)).toBe(10_000)
  })

  it("reads every setting it is given", async () => {
    const exit = await load({
      ADMIN_API_KEY: ADMIN,
      PORT: "9090",
      HOST: "127.0.0.1",
      PUBLIC_URL: "https://gate.example.com/",
      LOG_LEVEL: "debug",
      REDIS_URL: "redis://127.0.0.1:6390",
      SECRETS_KEY: "ab".repeat(32),
      WEBHOOK_RETRY_SCHEDULE: "1s, 2m,3h",
      WEBHOOK_TIMEOUT: "2500ms",
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
      HTTP_BODY_LIMIT_BYTES: "2048",
      RATE_LIMIT_PER_MINUTE: "0"
    })
    expect(Exit.isSuccess(exit)).toBe(true)
    const config = (exit as Exit.Success<AppConfig, never>).value
    expect(config).toMatchObject({ port: 9090, host: "127.0.0.1", logLevel: "debug", httpBodyLimitBytes: 2048, rateLimitPerMinute: 0 })
    expect(config.publicUrl).toBe("https://gate.example.com") // trailing slash dropped
    expect(Redacted.value(Option.getOrThrow(config.secretsKey))).toEqual(Buffer.alloc(32, 0xab))
    expect(config.webhookRetrySchedule.map(Duration.toMillis)).toEqual([1_000, 120_000, 10_800_000])
    expect(Duration.toMillis(config.webhookTimeout)).toBe(2_500)
    expect(config.webhookAllowPrivateNetworks).toBe(true)
  })

  it("takes SECRETS_KEY as base64 too", async () => {
    const exit = await load({ ADMIN_API_KEY: ADMIN, SECRETS_KEY: Buffer.alloc(32, 9).toString("base64") })
    const config = (exit as Exit.Success<AppConfig, never>).value
    expect(Redacted.value(Option.getOrThrow(config.secretsKey))).toEqual(Buffer.alloc(32, 9))
  })

  describe("refuses bad configuration with one line naming the variable", () => {
    const cases: ReadonlyArray<readonly [string, Record<string, string>, string]> = [
      ["ADMIN_API_KEY", { ADMIN_API_KEY: "too-short" }, "at least 16 characters"],
      ["PORT", { PORT: "http" }, "port"],
      ["PORT", { PORT: "65536" }, "port"],
      ["PUBLIC_URL", { PUBLIC_URL: "gate.example.com" }, "http:// or https:// URL"],
      ["LOG_LEVEL", { LOG_LEVEL: "verbose" }, "trace, debug, info"],
      ["REDIS_URL", { REDIS_URL: "http://127.0.0.1:6379" }, "redis:// or rediss://"],
      ["SECRETS_KEY", { REDIS_URL: "redis://127.0.0.1:6379" }, "is required when REDIS_URL is set"],
      ["SECRETS_KEY", { SECRETS_KEY: "c2hvcnQ=" }, "32 bytes"],
      ["TWILIO_API_BASE_URL", { TWILIO_API_BASE_URL: "api.twilio.com" }, "http:// or https:// URL"],
      ["TELNYX_API_BASE_URL", { TELNYX_API_BASE_URL: "ftp://api.telnyx.com" }, "http:// or https:// URL"],
      ["WEBHOOK_RETRY_SCHEDULE", { WEBHOOK_RETRY_SCHEDULE: "5s,later" }, "comma-separated list of durations"],
      ["WEBHOOK_RETRY_SCHEDULE", { WEBHOOK_RETRY_SCHEDULE: " , " }, "comma-separated list of durations"],
      ["WEBHOOK_TIMEOUT", { WEBHOOK_TIMEOUT: "ten seconds" }, "duration"],
      ["FALLBACK_WEBHOOK_TIMEOUT", { FALLBACK_WEBHOOK_TIMEOUT: "-5s" }, "duration"],
      ["WEBHOOK_ALLOW_PRIVATE_NETWORKS", { WEBHOOK_ALLOW_PRIVATE_NETWORKS: "maybe" }, "boolean"],
      ["HTTP_BODY_LIMIT_BYTES", { HTTP_BODY_LIMIT_BYTES: "100" }, "from 1024 to 10485760"],
      ["HTTP_BODY_LIMIT_BYTES", { HTTP_BODY_LIMIT_BYTES: "lots" }, "integer"],
      ["RATE_LIMIT_PER_MINUTE", { RATE_LIMIT_PER_MINUTE: "-1" }, "from 0 (no limit) to 1000000"],
      ["RATE_LIMIT_PER_MINUTE", { RATE_LIMIT_PER_MINUTE: "2.5" }, "integer"],
      ["SHUTDOWN_DRAIN_TIMEOUT", { SHUTDOWN_DRAIN_TIMEOUT: "soon" }, "duration"],
      ["INSTANCE_ID", { INSTANCE_ID: "{one}" }, "letters, digits or _ - ."],
      ["INSTANCE_ID", { INSTANCE_ID: "a".repeat(65) }, "1 to 64"],
      ["SESSION_END_BACKLOG_LIMIT", { SESSION_END_BACKLOG_LIMIT: "0" }, "from 1 to 10000000"],
      ["INSTANCE_TTL", { INSTANCE_TTL: "4s" }, "at least 5s"],
      ["INSTANCE_TTL", { INSTANCE_TTL: "soon" }, "expected a duration"]
    ]
    it.each(cases)("%s: %j", async (variable, env, problem) => {
      const line = await failureLine({ ADMIN_API_KEY: ADMIN, ...env })
      expect(line).toMatch(new RegExp(`^invalid configuration: ${variable}: `))
      expect(line).toContain(problem)
      expect(line).not.toContain("\n")
    })

    it("ADMIN_API_KEY: missing", async () => {
      expect(await failureLine({})).toBe("invalid configuration: ADMIN_API_KEY: is required but not set")
    })

    it("never repeats a secret's value", async () => {
      const admin = await failureLine({ ADMIN_API_KEY: "hunter2-short" })
      expect(admin).not.toContain("hunter2")
      const key = await failureLine({ ADMIN_API_KEY: ADMIN, SECRETS_KEY: "c3VwZXItc2VjcmV0LXZhbHVl" })
      expect(key).not.toContain("c3VwZXItc2VjcmV0LXZhbHVl")
      const redis = await failureLine({ ADMIN_API_KEY: ADMIN, REDIS_URL: "http://user:pa55word@redis.internal:6379" })
      expect(redis).not.toContain("pa55word")
    })
  })

  it("parseDuration reads ms, s, m, h, d and bare seconds", () => {
    const millis = (text: string) => Option.map(parseDuration(text), Duration.toMillis)
    expect(millis("250ms")).toEqual(Option.some(250))
    expect(millis("1.5s")).toEqual(Option.some(1_500))
    expect(millis("5m")).toEqual(Option.some(300_000))
    expect(millis("2h")).toEqual(Option.some(7_200_000))
    expect(millis("1d")).toEqual(Option.some(86_400_000))
    expect(millis("30")).toEqual(Option.some(30_000))
    expect(millis("5 weeks")).toEqual(Option.none())
    expect(millis("")).toEqual(Option.none())
  })
})
