import { isIP } from "node:net"
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

const isHttpUrl = (text: string) => {
  try {
    const url = new URL(text)
    return url.protocol === "http:" || url.protocol === "https:"
  } catch {
    return false
  }
}

const httpUrl = (name: keyof typeof defaults) =>
  Config.string(name).pipe(
    Config.withDefault(String(defaults[name])),
    check(name, "expected an http:// or https:// URL", isHttpUrl),
    Config.map((text) => text.replace(/\/+$/, ""))
  )

/** An optional http(s) URL without a default. */
const optionalHttpUrl = (name: string) =>
  Config.option(Config.string(name)).pipe(
    check(name, "expected an http:// or https:// URL", (text: Option.Option<string>) => Option.isNone(text) || isHttpUrl(text.value)),
    Config.map(Option.map((text) => text.replace(/\/+$/, "")))
  )

/** An integer setting with its default from config/defaults.ts, refused outside [min, max]. */
const integerIn = (name: keyof typeof defaults, min: number, max: number, meaningOfMin?: string) =>
  Config.integer(name).pipe(
    Config.withDefault(defaults[name] as number),
    check(name, `must be an integer from ${min}${meaningOfMin === undefined ? "" : ` (${meaningOfMin})`} to ${max}`, (n: number) => n >= min && n <= max)
  )

/** An IP address, or a CIDR block (address/prefix length). */
const isAddressOrCidr = (entry: string) => {
  const [address, bits, extra] = entry.split("/")
  const family = isIP(address ?? "")
  if (family === 0 || extra !== undefined) return false
  if (bits === undefined) return true
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128)
}

/** TRUSTED_PROXIES: a comma-separated list of addresses and CIDRs; empty (the default) trusts no proxy. */
const trustedProxies = Config.string("TRUSTED_PROXIES").pipe(
  Config.withDefault(defaults.TRUSTED_PROXIES),
  Config.mapOrFail((text) => {
    const entries = text.split(",").map((entry) => entry.trim()).filter((entry) => entry.length > 0)
    const bad = entries.find((entry) => !isAddressOrCidr(entry))
    return bad === undefined
      ? Either.right(entries as ReadonlyArray<string>)
      : Either.left(
          ConfigError.InvalidData(["TRUSTED_PROXIES"], `expected comma-separated IP addresses or CIDRs such as 172.28.0.10 or 10.0.0.0/8, got "${bad}"`)
        )
  })
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
  /** PUBLIC_URL as given; unset, it is derived from the listening address (src/config/PublicUrl.ts). */
  publicUrlSetting: optionalHttpUrl("PUBLIC_URL"),
  /** The fleet's one public address (the load balancer), when it is not PUBLIC_URL: Twilio signs voice webhooks over it. */
  fleetUrl: Config.option(
    Config.string("FLEET_URL").pipe(
      check("FLEET_URL", "expected an http:// or https:// URL", (text: string) => /^https?:\/\/[^/]/i.test(text)),
      Config.map((text) => text.replace(/\/+$/, ""))
    )
  ),
  logLevel: Config.literal(...logLevels)("LOG_LEVEL").pipe(Config.withDefault(defaults.LOG_LEVEL)),
  redisUrl: Config.option(
    Config.redacted("REDIS_URL").pipe(
      check("REDIS_URL", "expected a redis:// or rediss:// URL (redis-cluster://host:port,... for a Redis Cluster, redis-sentinel://host:port,.../name for Sentinel)", (value: Redacted.Redacted) =>
        /^(rediss?|redis-cluster|redis-sentinel):\/\//.test(Redacted.value(value))
      )
    )
  ),
  /** A Redis Cluster's nodes, `host:port,host:port` (any reachable one is enough): the same as REDIS_URL=redis-cluster://... */
  redisClusterNodes: Config.option(
    Config.redacted("REDIS_CLUSTER_NODES").pipe(
      check("REDIS_CLUSTER_NODES", "expected host:port[,host:port...]", (value: Redacted.Redacted) =>
        /^\s*[^\s,:/]+:\d{1,5}\s*(,\s*[^\s,:/]+:\d{1,5}\s*)*$/.test(Redacted.value(value))
      )
    )
  ),
  /** Redis Sentinel (docs/scaling.md): the sentinels, `host:port,host:port`; with REDIS_SENTINEL_NAME, the same as REDIS_URL=redis-sentinel://... */
  redisSentinels: Config.option(
    Config.string("REDIS_SENTINELS").pipe(
      check("REDIS_SENTINELS", "expected host:port[,host:port...]", (value: string) =>
        /^\s*[^\s,:/]+:\d{1,5}\s*(,\s*[^\s,:/]+:\d{1,5}\s*)*$/.test(value)
      )
    )
  ),
  /** The primary's name the sentinels monitor (`sentinel monitor NAME ...`). */
  redisSentinelName: Config.option(
    Config.string("REDIS_SENTINEL_NAME").pipe(
      check("REDIS_SENTINEL_NAME", "must be 1 to 64 letters, digits or _ - .", (text: string) => /^[A-Za-z0-9_.-]{1,64}$/.test(text))
    )
  ),
  /** The sentinels' own ACL user and password (`requirepass` in sentinel.conf), when they ask for one. */
  redisSentinelUsername: Config.option(Config.string("REDIS_SENTINEL_USERNAME")),
  redisSentinelPassword: Config.option(Config.redacted("REDIS_SENTINEL_PASSWORD")),
  /** The user and password of the primary and replicas reached through the sentinels. */
  redisUsername: Config.option(Config.string("REDIS_USERNAME")),
  redisPassword: Config.option(Config.redacted("REDIS_PASSWORD")),
  /**
   * Writes whose loss loses data wait for this many replicas (Redis `WAIT`; docs/scaling.md):
   * `auto` waits for one when the primary that took the write has a replica connected, a number
   * always waits for that many (0: never waits).
   */
  redisWaitReplicas: Config.string("REDIS_WAIT_REPLICAS").pipe(
    Config.withDefault(defaults.REDIS_WAIT_REPLICAS),
    check("REDIS_WAIT_REPLICAS", "expected auto or a number of replicas from 0 to 5", (text: string) => /^(auto|[0-5])$/.test(text.trim())),
    Config.map((text): "auto" | number => (text.trim() === "auto" ? "auto" : Number(text)))
  ),
  /** How long such a write waits for its replicas before it counts as not written (the journal retries it, the API answers 503). */
  redisWaitTimeout: duration("REDIS_WAIT_TIMEOUT").pipe(
    check("REDIS_WAIT_TIMEOUT", "must be from 10ms to 30s", (d: Duration.Duration) => Duration.toMillis(d) >= 10 && Duration.toMillis(d) <= 30_000)
  ),
  adminApiKey: Config.redacted("ADMIN_API_KEY").pipe(
    check("ADMIN_API_KEY", "must be at least 16 characters", (value: Redacted.Redacted) => Redacted.value(value).length >= 16)
  ),
  secretsKey,
  redisKeyPrefix: Config.string("REDIS_KEY_PREFIX").pipe(
    Config.withDefault(defaults.REDIS_KEY_PREFIX),
    check("REDIS_KEY_PREFIX", "must be 1 to 64 letters, digits or _ - . : without braces", (text: string) => /^[A-Za-z0-9_.:-]{1,64}$/.test(text))
  ),
  redisCommandTimeout: duration("REDIS_COMMAND_TIMEOUT").pipe(
    check("REDIS_COMMAND_TIMEOUT", "must be between 50ms and 60s", (d: Duration.Duration) => Duration.toMillis(d) >= 50 && Duration.toMillis(d) <= 60_000)
  ),
  redisConnectTimeout: duration("REDIS_CONNECT_TIMEOUT").pipe(
    check("REDIS_CONNECT_TIMEOUT", "must be between 100ms and 60s", (d: Duration.Duration) => Duration.toMillis(d) >= 100 && Duration.toMillis(d) <= 60_000)
  ),
  twilioAccountSid: Config.option(Config.string("TWILIO_ACCOUNT_SID")),
  twilioAuthToken: optionalSecret("TWILIO_AUTH_TOKEN"),
  twilioApiBaseUrl: httpUrl("TWILIO_API_BASE_URL"),
  telnyxApiKey: optionalSecret("TELNYX_API_KEY"),
  telnyxApiBaseUrl: httpUrl("TELNYX_API_BASE_URL"),
  telnyxPublicKey: Config.option(Config.string("TELNYX_PUBLIC_KEY")),
  /** The Telnyx Call Control application (connection id) outbound Telnyx calls are placed on. */
  telnyxConnectionId: Config.option(Config.string("TELNYX_CONNECTION_ID")),
  outboundAnswerGrace: duration("OUTBOUND_ANSWER_GRACE"),
  outboundDefaultProvider: Config.literal("twilio", "telnyx")("OUTBOUND_DEFAULT_PROVIDER").pipe(
    Config.withDefault(defaults.OUTBOUND_DEFAULT_PROVIDER as "twilio" | "telnyx")
  ),
  carrierRequestTimeout: duration("CARRIER_REQUEST_TIMEOUT"),
  webhookRetrySchedule: durationList("WEBHOOK_RETRY_SCHEDULE"),
  webhookTimeout: duration("WEBHOOK_TIMEOUT"),
  fallbackWebhookTimeout: duration("FALLBACK_WEBHOOK_TIMEOUT"),
  webhookAllowPrivateNetworks: Config.boolean("WEBHOOK_ALLOW_PRIVATE_NETWORKS").pipe(
    Config.withDefault(defaults.WEBHOOK_ALLOW_PRIVATE_NETWORKS)
  ),
  agentAllowPrivateNetworks: Config.boolean("AGENT_ALLOW_PRIVATE_NETWORKS").pipe(
    Config.withDefault(defaults.AGENT_ALLOW_PRIVATE_NETWORKS)
  ),
  /** Extra CA certificates (PEM file) trusted for webhook destinations, beside the system roots. */
  webhookCaFile: Config.option(Config.string("WEBHOOK_CA_FILE")),
  webhookConcurrency: integerIn("WEBHOOK_CONCURRENCY", 1, 4096),
  webhookConcurrencyPerHost: integerIn("WEBHOOK_CONCURRENCY_PER_HOST", 1, 4096),
  httpBodyLimitBytes: integerIn("HTTP_BODY_LIMIT_BYTES", 1024, 10_485_760),
  shutdownDrainTimeout: duration("SHUTDOWN_DRAIN_TIMEOUT"),
  sessionMaxDuration: duration("SESSION_MAX_DURATION"),
  sessionRetention: duration("SESSION_RETENTION"),
  agentConnectTimeout: duration("AGENT_CONNECT_TIMEOUT"),
  /** Agent failovers one session may have (docs/reliability.md, "Agent failover"); 0: none, the fallback runs at once. */
  agentFailoverMaxPerSession: integerIn("AGENT_FAILOVER_MAX_PER_SESSION", 0, 20, "no failover"),
  agentPingInterval: duration("AGENT_PING_INTERVAL"),
  carrierIdleTimeout: duration("CARRIER_IDLE_TIMEOUT"),
  handshakeTimeout: duration("HANDSHAKE_TIMEOUT"),
  socketMessageRate: integerIn("SOCKET_MESSAGE_RATE", 1, 100_000),
  socketMessageBurst: integerIn("SOCKET_MESSAGE_BURST", 1, 1_000_000),
  httpHeadersTimeout: duration("HTTP_HEADERS_TIMEOUT"),
  httpRequestTimeout: duration("HTTP_REQUEST_TIMEOUT"),
  httpKeepAliveTimeout: duration("HTTP_KEEP_ALIVE_TIMEOUT"),
  carrierWebhookBodyLimitBytes: integerIn("CARRIER_WEBHOOK_BODY_LIMIT_BYTES", 1024, 1_048_576),
  authFailuresPerMinute: integerIn("AUTH_FAILURES_PER_MINUTE", 0, 1_000_000, "no limit"),
  /** Proxies whose X-Forwarded-For is believed (docs/security.md, "Behind a proxy"); empty: none. */
  trustedProxies,
  rateLimitPerMinute: integerIn("RATE_LIMIT_PER_MINUTE", 0, 1_000_000, "no limit"),
  vadMode: integerIn("VAD_MODE", 0, 3),
  vadMinSpeechMs: integerIn("VAD_MIN_SPEECH_MS", 20, 2000),
  vadAgentMinSpeechMs: integerIn("VAD_AGENT_MIN_SPEECH_MS", 20, 1000),
  turnEndSilenceMs: integerIn("TURN_END_SILENCE_MS", 100, 5000),
  breakerStoreTimeout: duration("BREAKER_STORE_TIMEOUT"),
  /** While an environment's breaker is open, one new call per this interval goes to an agent as the probe (docs/fallback.md, "Shedding"). */
  breakerProbeInterval: duration("BREAKER_PROBE_INTERVAL"),
  /** How long a transfer rings before it counts as not answered (the `<Dial timeout>`, Telnyx `timeout_secs`; docs/fallback.md, "Transfer outcomes"). */
  transferRingTimeout: duration("TRANSFER_RING_TIMEOUT"),
  dataDir: Config.string("DATA_DIR").pipe(
    Config.withDefault(defaults.DATA_DIR),
    check("DATA_DIR", "must not be empty", (text: string) => text.trim().length > 0)
  ),
  /** This instance's name in the store (session ownership, the fleet); generated and kept in DATA_DIR when unset. */
  instanceId: Config.option(
    Config.string("INSTANCE_ID").pipe(
      // The path is the variable's already (Config.string prefixes it), so the error adds none.
      Config.mapOrFail((text) =>
        /^[A-Za-z0-9_.-]{1,64}$/.test(text)
          ? Either.right(text)
          : Either.left(ConfigError.InvalidData([], "must be 1 to 64 letters, digits or _ - . (no braces or colons)"))
      )
    )
  ),
  sessionEndBacklogLimit: integerIn("SESSION_END_BACKLOG_LIMIT", 1, 10_000_000),
  /** How long an instance may go without refreshing its registry entry before the fleet counts it gone (docs/scaling.md). */
  instanceTtl: duration("INSTANCE_TTL").pipe(
    check("INSTANCE_TTL", "must be at least 5s (instances refresh their entry every 2s)", (d: Duration.Duration) => Duration.toMillis(d) >= 5000)
  )
})

export type Settings = Config.Config.Success<typeof settings> & {
  /** PUBLIC_URL, or (unset) http://HOST:PORT with a wildcard HOST as loopback; PublicUrl has the listened-on value. */
  readonly publicUrl: string
}

const withPublicUrl = (s: Config.Config.Success<typeof settings>): Settings => ({
  ...s,
  publicUrl: Option.getOrElse(s.publicUrlSetting, () => {
    const host = s.host === "0.0.0.0" ? "127.0.0.1" : s.host === "::" ? "[::1]" : s.host.includes(":") ? `[${s.host}]` : s.host
    return `http://${host}:${s.port}`
  })
})

/**
 * `redis-sentinel://[user:password@]host:port,host:port/NAME[?sentinelUsername=..&sentinelPassword=..]`:
 * the form REDIS_SENTINELS and its settings are turned into (RedisConnection reads it).
 */
export const sentinelUrl = (s: {
  readonly sentinels: string
  readonly name: string
  readonly username?: string | undefined
  readonly password?: string | undefined
  readonly sentinelUsername?: string | undefined
  readonly sentinelPassword?: string | undefined
}) => {
  const credentials =
    s.password !== undefined ? `${encodeURIComponent(s.username ?? "")}:${encodeURIComponent(s.password)}@` : s.username !== undefined ? `${encodeURIComponent(s.username)}@` : ""
  const query = new URLSearchParams()
  if (s.sentinelUsername !== undefined) query.set("sentinelUsername", s.sentinelUsername)
  if (s.sentinelPassword !== undefined) query.set("sentinelPassword", s.sentinelPassword)
  const search = query.toString()
  return `redis-sentinel://${credentials}${s.sentinels.replace(/\s+/g, "")}/${s.name}${search === "" ? "" : `?${search}`}`
}

/** Cross-field rules that a single variable's validation cannot express. */
const checkCombination = (given: Settings): Either.Either<Settings, ConfigError.ConfigError> => {
  if (Option.isSome(given.redisUrl) && Option.isSome(given.redisClusterNodes)) {
    return Either.left(ConfigError.InvalidData(["REDIS_CLUSTER_NODES"], "set either REDIS_URL or REDIS_CLUSTER_NODES, not both"))
  }
  if (Duration.toMillis(given.redisWaitTimeout) >= Duration.toMillis(given.redisCommandTimeout)) {
    return Either.left(ConfigError.InvalidData(["REDIS_WAIT_TIMEOUT"], "must be shorter than REDIS_COMMAND_TIMEOUT (WAIT is a Redis command too)"))
  }
  if (Option.isSome(given.redisSentinels) !== Option.isSome(given.redisSentinelName)) {
    return Either.left(ConfigError.InvalidData([Option.isSome(given.redisSentinels) ? "REDIS_SENTINEL_NAME" : "REDIS_SENTINELS"], "is required with Redis Sentinel (set REDIS_SENTINELS and REDIS_SENTINEL_NAME together)"))
  }
  if (Option.isSome(given.redisSentinels) && (Option.isSome(given.redisUrl) || Option.isSome(given.redisClusterNodes))) {
    return Either.left(ConfigError.InvalidData(["REDIS_SENTINELS"], "set one of REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS"))
  }
  // REDIS_CLUSTER_NODES is REDIS_URL=redis-cluster://nodes, REDIS_SENTINELS and its settings
  // REDIS_URL=redis-sentinel://...: one setting picks the store below.
  const s: Settings = Option.isSome(given.redisClusterNodes)
    ? { ...given, redisUrl: Option.some(Redacted.make(`redis-cluster://${Redacted.value(given.redisClusterNodes.value).replace(/\s+/g, "")}`)) }
    : Option.isSome(given.redisSentinels) && Option.isSome(given.redisSentinelName)
      ? {
          ...given,
          redisUrl: Option.some(
            Redacted.make(
              sentinelUrl({
                sentinels: given.redisSentinels.value,
                name: given.redisSentinelName.value,
                username: Option.getOrUndefined(given.redisUsername),
                password: Option.map(given.redisPassword, Redacted.value).pipe(Option.getOrUndefined),
                sentinelUsername: Option.getOrUndefined(given.redisSentinelUsername),
                sentinelPassword: Option.map(given.redisSentinelPassword, Redacted.value).pipe(Option.getOrUndefined)
              })
            )
          )
        }
      : given
  if (Option.isSome(s.redisUrl) && Option.isNone(s.secretsKey)) {
    return Either.left(
      ConfigError.MissingData(["SECRETS_KEY"], "is required when REDIS_URL is set (secrets at rest are encrypted with it)")
    )
  }
  return Either.right(s)
}

export class AppConfig extends Effect.Service<AppConfig>()("callgate/AppConfig", {
  effect: Effect.flatMap(Effect.map(settings, withPublicUrl), (s) => Either.match(checkCombination(s), { onLeft: Effect.fail, onRight: Effect.succeed }))
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
