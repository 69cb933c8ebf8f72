/**
 * Defaults for every setting callgate reads from the environment. The variable names are the keys;
 * `src/config/AppConfig.ts` reads them through Effect `Config` and validates them. Anything without
 * a default here (ADMIN_API_KEY, SECRETS_KEY, carrier credentials, REDIS_URL) must be given by the
 * operator or stays unset.
 */
export const defaults = {
  PORT: 8080,
  HOST: "0.0.0.0",
  LOG_LEVEL: "info",
  /** Every Redis key and channel callgate uses starts with this, so several deployments can share one Redis. */
  REDIS_KEY_PREFIX: "callgate:",
  REDIS_WAIT_REPLICAS: "auto",
  REDIS_WAIT_TIMEOUT: "500ms",
  /**
   * Longest one Redis command may take; past it the command fails, and a connection whose
   * health check (a PING every half second) times out is counted unreachable and reconnected.
   */
  REDIS_COMMAND_TIMEOUT: "1s",
  /** Longest a connection attempt to Redis may take (TCP connect and the ready check). */
  REDIS_CONNECT_TIMEOUT: "2s",
  TWILIO_API_BASE_URL: "https://api.twilio.com",
  TELNYX_API_BASE_URL: "https://api.telnyx.com/v2",
  /** The carrier of an outbound call whose request names none: twilio or telnyx. */
  OUTBOUND_DEFAULT_PROVIDER: "twilio",
  /**
   * How long past its ring timeout an outbound call may go without its carrier reporting an
   * ending or its stream opening; then callgate gives up on it (the carrier's reports were lost).
   */
  OUTBOUND_ANSWER_GRACE: "60s",
  /** How long one carrier REST request (hang up, transfer, apply TwiML) may take before it counts as failed. */
  CARRIER_REQUEST_TIMEOUT: "5s",
  /** Delays between event webhook attempts, each jittered by +-20%. */
  WEBHOOK_RETRY_SCHEDULE: "5s,5m,30m,2h,5h,10h,14h,20h,24h",
  WEBHOOK_TIMEOUT: "10s",
  FALLBACK_WEBHOOK_TIMEOUT: "5s",
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: false,
  /** Let dial-out agentUrls use ws:// and reach loopback, private, link-local and CGNAT addresses (development and tests only). */
  AGENT_ALLOW_PRIVATE_NETWORKS: false,
  /** Event webhook requests in flight per instance, and per destination host (host:port). */
  WEBHOOK_CONCURRENCY: 64,
  WEBHOOK_CONCURRENCY_PER_HOST: 16,
  /** Largest accepted /v1 request body. */
  HTTP_BODY_LIMIT_BYTES: 65536,
  /** Requests per minute each API key (or, without a key, each client address) may make to /v1; 0 turns the limit off. */
  RATE_LIMIT_PER_MINUTE: 1200,
  /** How long live calls may run on after SIGTERM before they are cut. */
  SHUTDOWN_DRAIN_TIMEOUT: "30s",
  /** Longest a call session may last; it then ends with status timeout and the call is hung up. */
  SESSION_MAX_DURATION: "4h",
  /** How long ended sessions stay readable through /v1 before the store drops them. */
  SESSION_RETENTION: "30d",
  /** How long callgate waits to open a dial-out agent WebSocket (environment agentUrl). */
  AGENT_CONNECT_TIMEOUT: "5s",
  /** Agent failovers one session may have (docs/reliability.md, "Agent failover"); the next abnormal agent end runs the error fallback. */
  AGENT_FAILOVER_MAX_PER_SESSION: 2,
  /** A carrier media stream that sends no frame for this long is a hard stream error (carriers send media every 20 ms). */
  CARRIER_IDLE_TIMEOUT: "10s",
  /** A media stream or dial-in agent socket that has not authenticated within this long is closed with 1008. */
  HANDSHAKE_TIMEOUT: "5s",
  /** Messages per second each media stream and agent socket may send, sustained; beyond the burst it is closed with 1008. */
  SOCKET_MESSAGE_RATE: 200,
  /** Messages a media stream or agent socket may send at once above the sustained rate. */
  SOCKET_MESSAGE_BURST: 300,
  /** How long a client may take to send an HTTP request's headers. */
  HTTP_HEADERS_TIMEOUT: "10s",
  /** How long a client may take to send a whole HTTP request (headers and body); a slow body gets 408. */
  HTTP_REQUEST_TIMEOUT: "15s",
  /** How long an idle keep-alive HTTP connection is kept open. */
  HTTP_KEEP_ALIVE_TIMEOUT: "5s",
  /** Largest body accepted on the unauthenticated carrier webhooks (voice, TeXML, Call Control). */
  CARRIER_WEBHOOK_BODY_LIMIT_BYTES: 16384,
  /** Failed authentications (any route or socket) each client address may make per minute before 429. */
  AUTH_FAILURES_PER_MINUTE: 30,
  /**
   * Proxies (addresses or CIDRs, comma-separated) whose X-Forwarded-For names the client: the
   * per-address limits then key on the real client. Empty: the TCP peer is the client.
   */
  TRUSTED_PROXIES: "",
  /** Agent WebSockets are pinged this often; one that missed the previous pong is cut. */
  AGENT_PING_INTERVAL: "15s",
  /** WebRTC VAD aggressiveness, 0 (least) to 3 (most eager to call audio non-speech); 3 suits noisy phone lines. */
  VAD_MODE: 3,
  /** Voiced audio must last this long (ms) to count as caller speech; shorter bursts (clicks, noise onsets) are ignored. */
  VAD_MIN_SPEECH_MS: 160,
  /** Voiced agent audio must last this long (ms) to count as the agent responding (comfort noise onsets are shorter). */
  VAD_AGENT_MIN_SPEECH_MS: 100,
  /** Silence (ms) after caller speech that ends the caller's turn. */
  TURN_END_SILENCE_MS: 700,
  /** Longest the breaker waits for Redis before it counts on this instance's local window instead. */
  BREAKER_STORE_TIMEOUT: "250ms",
  /** While a breaker is open, one new call per this interval goes to an agent as the probe; the others are shed. */
  BREAKER_PROBE_INTERVAL: "30s",
  /** How long a transfer (the phone fallback, an agent's transfer) rings before it counts as not answered. */
  TRANSFER_RING_TIMEOUT: "30s",
  /**
   * Where this instance keeps what must outlive it on local disk: its generated instance id and the spool of
   * session ends the store could not take before a stop (docs/reliability.md).
   */
  DATA_DIR: "./data",
  /**
   * Session ends (record write + session.ended) kept in memory while the store is unreachable; at this many, the
   * entry refuses new calls with 503 until the store answers again.
   */
  SESSION_END_BACKLOG_LIMIT: 10000,
  /**
   * An instance that has not refreshed its registry entry for this long is gone: no call is placed on it and the
   * survivors rescue its calls (docs/reliability.md). At least 5s (instances refresh every 2s).
   */
  INSTANCE_TTL: "10s"
} as const
