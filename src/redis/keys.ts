/**
 * The Redis key layout, in one place. Everything lives under one prefix (REDIS_KEY_PREFIX); keys about one environment
 * carry the hash tag `{agentId:environmentId}` so a Redis Cluster keeps them in one slot and a Lua
 * script may touch several of them. Ids are validated (ResourceId) to hold no braces or colons.
 */
export const KEY_PREFIX = "callgate:"

export const envTag = (agentId: string, environmentId: string) => `{${agentId}:${environmentId}}`

/** The key layout under `prefix` (REDIS_KEY_PREFIX, default "callgate:"). */
export const makeKeys = (KEY_PREFIX: string) => ({
  environment: (agentId: string, environmentId: string) => `${KEY_PREFIX}env:${envTag(agentId, environmentId)}`,
  agentEnvironments: (agentId: string) => `${KEY_PREFIX}agent:{${agentId}}:environments`,
  /** Set of every agent id that ever had an environment (the agents index; never shrinks: readers skip agents with none left). */
  agents: `${KEY_PREFIX}agents`,
  /** A scoped API key's record (JSON), addressed by a hash of the key: its current one, or its previous one during a rotation's grace (expiring). */
  apiKey: (keyHash: string) => `${KEY_PREFIX}apikey:${keyHash}`,
  /** Hash: key id -> its current key hash (the list of keys). */
  apiKeyIndex: `${KEY_PREFIX}apikeys`,
  /** Hash: key id -> when it last authenticated a request (ISO 8601). */
  apiKeyLastUsed: `${KEY_PREFIX}apikeys:last-used`,
  /** Pub/sub channel (not a key): the id of each revoked key, so every instance closes its sockets. */
  apiKeyRevokedChannel: `${KEY_PREFIX}apikeys:revoked`,
  /** Sorted set of the environment's no-response occurrences: member session id, score Redis time (ms). */
  breakerOccurrences: (agentId: string, environmentId: string) => `${KEY_PREFIX}breaker:${envTag(agentId, environmentId)}:occurrences`,
  /** The environment's last breaker trip: JSON {at, sessionId, count, threshold}, `at` in Redis time (ms). */
  breakerLastTrip: (agentId: string, environmentId: string) => `${KEY_PREFIX}breaker:${envTag(agentId, environmentId)}:last-trip`,
  /** The environment's probe slot while its breaker is open: the probe call's session id, expiring after BREAKER_PROBE_INTERVAL. */
  breakerProbe: (agentId: string, environmentId: string) => `${KEY_PREFIX}breaker:${envTag(agentId, environmentId)}:probe`,
  /** Pub/sub channel (not a key) on which every instance hears every breaker trip. */
  breakerTripsChannel: `${KEY_PREFIX}breaker:trips`,
  /**
   * The webhook outbox. Every key of one queue shares the hash tag `{queue}` (not the environment's
   * tag): the claim script moves deliveries of all environments between the queue's sorted sets.
   */
  outboxQueue: (queue: string, part: "due" | "leases" | "pending-since" | "seq") => `${KEY_PREFIX}outbox:{${queue}}:${part}`,
  outboxDeliveryPrefix: (queue: string) => `${KEY_PREFIX}outbox:{${queue}}:delivery:`,
  outboxEnvironment: (queue: string, agentId: string, environmentId: string, part: "deliveries" | "pending") =>
    `${KEY_PREFIX}outbox:{${queue}}:env:${agentId}:${environmentId}:${part}`,
  /** Sessions: every key of one agent's sessions shares the tag {agentId}, so one MULTI writes them. */
  session: (agentId: string, sessionId: string) => `${KEY_PREFIX}session:{${agentId}}:${sessionId}`,
  agentSessions: (agentId: string) => `${KEY_PREFIX}agent:{${agentId}}:sessions`,
  environmentSessions: (agentId: string, environmentId: string) => `${KEY_PREFIX}agent:{${agentId}}:env:${environmentId}:sessions`,
  /** Set of "agentId sessionId" an instance owns until each session's end is written and its session.ended queued. */
  instanceSessions: (instanceId: string) => `${KEY_PREFIX}instance:{${instanceId}}:sessions`,
  /** Set of "agentId sessionId" another instance took over from this one (SessionFencing notes), read and cleared by it. */
  instanceTaken: (instanceId: string) => `${KEY_PREFIX}instance:{${instanceId}}:taken`,
  /** The instance registry: id -> JSON report, and id -> last refresh (Redis time, ms). One tag, one slot. */
  instances: (part: "records" | "seen") => `${KEY_PREFIX}fleet:{instances}:${part}`,
  /**
   * One environment's dial-in agents across the fleet: idle socket -> instance, instance -> last
   * publication (Redis time, ms), socket -> end of its hold. The environment's tag: one slot.
   */
  fleetAgents: (agentId: string, environmentId: string, part: "idle" | "seen" | "held") =>
    `${KEY_PREFIX}fleet:${envTag(agentId, environmentId)}:${part}`,
  /**
   * The environment's fleet-wide call leases (docs/scaling.md): sorted sets, member session id,
   * score the lease's expiry (Redis time, ms); `calls` holds every call, `outbound` the outbound ones.
   */
  callLeases: (agentId: string, environmentId: string, part: "calls" | "outbound") => `${KEY_PREFIX}leases:${envTag(agentId, environmentId)}:${part}`,
  /** A session token presented by a media stream (single use), kept until the token expires. */
  spentToken: (tokenId: string) => `${KEY_PREFIX}token:${tokenId}`
})

export type RedisKeys = ReturnType<typeof makeKeys>

/** The layout under the default prefix. */
export const keys: RedisKeys = makeKeys(KEY_PREFIX)
