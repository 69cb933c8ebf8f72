import { isIP } from "node:net"
import { Redacted } from "effect"
import { closest, distance } from "fastest-levenshtein"
import { defaults } from "../../config/defaults.js"
import type { AppConfig } from "./AppConfig.js"

/**
 * What the start-up log warns about in the security settings (docs/security.md, "Start-up
 * warnings"): settings that pass validation but leave a deployment open, and variables callgate
 * does not read although their names look like its own (a misspelt setting is otherwise silently
 * ignored and its default applies).
 */

/** Admin keys printed in the README and docs: anyone can read them. */
export const PUBLISHED_ADMIN_KEYS: ReadonlySet<string> = new Set(["dev-admin-key-change-me", "change-me-to-a-long-random-key"])

/** The variables callgate reads that have no default in config/defaults.ts (a test keeps this complete). */
export const VARIABLES_WITHOUT_DEFAULT = [
  "ADMIN_API_KEY",
  "SECRETS_KEY",
  "PUBLIC_URL",
  "INSTANCE_ID",
  "FLEET_URL",
  "REDIS_URL",
  "REDIS_CLUSTER_NODES",
  "REDIS_SENTINELS",
  "REDIS_SENTINEL_NAME",
  "REDIS_SENTINEL_USERNAME",
  "REDIS_SENTINEL_PASSWORD",
  "REDIS_USERNAME",
  "REDIS_PASSWORD",
  "TWILIO_ACCOUNT_SID",
  "TWILIO_AUTH_TOKEN",
  "TELNYX_API_KEY",
  "TELNYX_CONNECTION_ID",
  "TELNYX_PUBLIC_KEY",
  "WEBHOOK_CA_FILE",
  "RECORDINGS_DIR",
  "RECORDINGS_RETENTION_DAYS",
  "RECORDINGS_S3_URL",
  "RECORDINGS_SWEEP_INTERVAL_MS",
  "AWS_ACCESS_KEY_ID",
  "AWS_SECRET_ACCESS_KEY",
  "AWS_SESSION_TOKEN",
  "AWS_REGION"
] as const

export const knownVariables = (): ReadonlySet<string> => new Set([...Object.keys(defaults), ...VARIABLES_WITHOUT_DEFAULT])

/** Families read by the libraries callgate embeds (OpenTelemetry's SDK, the AWS SDK): never reported. */
const LIBRARY_PREFIXES = ["OTEL_", "AWS_"]

export const isKnownVariable = (name: string, known = knownVariables()) => known.has(name) || LIBRARY_PREFIXES.some((prefix) => name.startsWith(prefix))

/** Prefixes only callgate's own settings use among common environments: an unknown one is likely a typo. */
const OWN_PREFIXES = ["TWILIO_", "TELNYX_", "REDIS_", "WEBHOOK_", "BREAKER_", "AGENT_", "CALLGATE_", "RECORDINGS_"]

/** Variables other tools read beside callgate's (the examples' receiver, the fleet script). */
const NOT_OURS: ReadonlySet<string> = new Set(["CALLGATE_WEBHOOK_SECRET", "CALLGATE_API_KEY", "CALLGATE"])

const isLoopbackHost = (host: string) => host === "localhost" || host === "::1" || (isIP(host) === 4 && host.startsWith("127."))

/**
 * The unknown variables in `env` that look like callgate's: one of its prefixes, or at most two
 * edits from one of its names (for names of 6 characters or more, so HOME is not taken for HOST).
 * Each with the closest known name.
 */
export const lookalikeVariables = (env: Readonly<Record<string, string | undefined>>, known = knownVariables()) => {
  const names = [...known]
  const found: Array<{ readonly name: string; readonly suggestion: string | undefined }> = []
  for (const name of Object.keys(env).sort()) {
    if (isKnownVariable(name, known) || NOT_OURS.has(name) || name !== name.toUpperCase() || name.startsWith("npm_")) continue
    const nearest = closest(name, names)
    const near = name.length >= 6 && distance(name, nearest) <= 2
    if (!near && !OWN_PREFIXES.some((prefix) => name.startsWith(prefix))) continue
    found.push({ name, suggestion: distance(name, nearest) <= Math.max(2, Math.floor(name.length / 3)) ? nearest : undefined })
  }
  return found
}

/** The start-up warnings for this configuration, listening on `listeningHost`, one message each. */
export const startupWarnings = (config: AppConfig, listeningHost: string, env: Readonly<Record<string, string | undefined>>): Array<string> => {
  const warnings: Array<string> = []
  if (PUBLISHED_ADMIN_KEYS.has(Redacted.value(config.adminApiKey)) && !isLoopbackHost(listeningHost)) {
    warnings.push(
      `ADMIN_API_KEY is the example key published in callgate's documentation and callgate listens on ${listeningHost}, ` +
        "beyond this machine: anyone who can reach it can administer it. Set ADMIN_API_KEY to a long random secret, or HOST=127.0.0.1"
    )
  }
  if (config.webhookAllowPrivateNetworks) {
    warnings.push(
      "WEBHOOK_ALLOW_PRIVATE_NETWORKS=true: webhook and fallback URLs may reach private, loopback and cloud metadata addresses " +
        "(the SSRF protection is off; for local development only)"
    )
  }
  if (config.agentAllowPrivateNetworks) {
    warnings.push(
      "AGENT_ALLOW_PRIVATE_NETWORKS=true: agent URLs may be ws:// and reach private, loopback and cloud metadata addresses " +
        "(the SSRF protection is off; for local development only)"
    )
  }
  for (const { name, suggestion } of lookalikeVariables(env)) {
    warnings.push(`${name} is set but callgate does not read it${suggestion !== undefined ? `: did you mean ${suggestion}?` : ""}`)
  }
  return warnings
}
