/**
 * Defaults for every setting callgate reads from the environment. The variable names are the keys;
 * `src/config/AppConfig.ts` reads them through Effect `Config` and validates them. Anything without
 * a default here (ADMIN_API_KEY, SECRETS_KEY, carrier credentials, REDIS_URL) must be given by the
 * operator or stays unset.
 */
export const defaults = {
  PORT: 8080,
  HOST: "0.0.0.0",
  /** Base URL the carriers reach callgate on; the wss:// stream URLs are built from it. */
  PUBLIC_URL: "http://localhost:8080",
  LOG_LEVEL: "info",
  TWILIO_API_BASE_URL: "https://api.twilio.com",
  TELNYX_API_BASE_URL: "https://api.telnyx.com/v2",
  /** Delays between event webhook attempts, each jittered by +-20%. */
  WEBHOOK_RETRY_SCHEDULE: "5s,5m,30m,2h,5h,10h,14h,20h,24h",
  WEBHOOK_TIMEOUT: "10s",
  FALLBACK_WEBHOOK_TIMEOUT: "5s",
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: false,
  /** Largest accepted /v1 request body. */
  HTTP_BODY_LIMIT_BYTES: 65536,
  /** How long live calls may run on after SIGTERM before they are cut. */
  SHUTDOWN_DRAIN_TIMEOUT: "30s"
} as const
