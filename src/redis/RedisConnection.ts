import { type Clock, Context, Duration, Effect, ExecutionStrategy, Exit, Layer, Option, Redacted, Runtime, Scope } from "effect"
import { Cluster, Redis } from "ioredis"
import { AppConfig } from "../config/AppConfig.js"
import { STORE_UNREACHABLE, StoreError } from "../kernel/StoreError.js"
import { makeKeys, type RedisKeys } from "./keys.js"
import { makeReplicated, type WaitReplicas } from "./RedisReplication.js"

/** One Redis server or a Redis Cluster (ioredis `Cluster`): the same commands for the adapters. */
export type RedisClient = Redis | Cluster

/**
 * The shared ioredis connection, opened for the lifetime of the layer and closed on shutdown.
 * `duplicate` opens a further connection (for SUBSCRIBE, which takes a connection over) that
 * closes with the caller's scope.
 */
export interface RedisConnectionShape {
  readonly client: RedisClient
  readonly duplicate: Effect.Effect<RedisClient, never, import("effect").Scope.Scope>
  /** Every key and channel name, under this deployment's REDIS_KEY_PREFIX. */
  readonly keys: RedisKeys
  /**
   * After a write whose loss loses data (an outbox enqueue, a session's end, an API key or
   * environment change): waits until the replicas REDIS_WAIT_REPLICAS asks for have it (Redis
   * WAIT on `key`'s primary), else fails (docs/scaling.md, "Redis that fails over: Sentinel and Cluster replicas").
   */
  readonly replicated: (key: string, operation: string) => Effect.Effect<void, StoreError>
}

export class RedisConnection extends Context.Tag("callgate/RedisConnection")<RedisConnection, RedisConnectionShape>() {}

/** `redis://host:port` (or rediss://): the address without user, password or database, for logs. */
export const redisAddress = (url: string): string => {
  if (isSentinelUrl(url)) {
    const { sentinels, name } = parseSentinelUrl(url)
    return `redis-sentinel://${sentinels.map((node) => `${node.host}:${node.port}`).join(",")}/${name}`
  }
  if (isClusterUrl(url)) return `redis-cluster://${parseClusterUrl(url).nodes.map((node) => `${node.host}:${node.port}`).join(",")}`
  try {
    const parsed = new URL(url)
    return `${parsed.protocol}//${parsed.hostname}:${parsed.port === "" ? "6379" : parsed.port}`
  } catch {
    return "redis (unparseable REDIS_URL)"
  }
}

/** Why a connection attempt failed, in words, from the socket error's code. */
export const connectionProblem = (error: unknown): string => {
  const code = typeof error === "object" && error !== null && "code" in error ? String(error.code) : ""
  const message = error instanceof Error ? error.message.split("\n")[0]! : String(error)
  const known: Record<string, string> = {
    ECONNREFUSED: "connection refused",
    ETIMEDOUT: "connection timed out",
    ECONNRESET: "connection reset",
    EHOSTUNREACH: "host unreachable",
    ENETUNREACH: "network unreachable",
    ENOTFOUND: "host not found",
    EAI_AGAIN: "host name lookup failed",
    EPIPE: "connection closed"
  }
  if (known[code]) return known[code]!
  if (/WRONGPASS|NOAUTH|invalid password|invalid username/i.test(message)) return "authentication failed"
  return message.replace(/:\/\/[^@\s]*@/g, "://")
}

/** How often the main connection checks that Redis answers (a PING, bounded by REDIS_COMMAND_TIMEOUT). */
export const HEALTH_CHECK_INTERVAL_MS = 500

export interface RedisTimeouts {
  /** REDIS_COMMAND_TIMEOUT: longest one command may take. */
  readonly commandTimeoutMs: number
  /** REDIS_CONNECT_TIMEOUT: longest a connection attempt may take. */
  readonly connectTimeoutMs: number
}

export const DEFAULT_REDIS_TIMEOUTS: RedisTimeouts = { commandTimeoutMs: 1000, connectTimeoutMs: 2000 }

/**
 * Reports the connection's state changes, one log line each (docs/turns-and-breaker.md, "When
 * Redis is slow or down"): unreachable (with the address and why, never the password) and reachable again
 * (with how long it was away). While it is down, commands fail at once instead of waiting in
 * ioredis's offline queue, so callers (the voice webhook above all) answer 503 without delay.
 *
 * A Redis that drops packets closes nothing: the socket stays open and commands wait. So the
 * connection is also checked every HEALTH_CHECK_INTERVAL_MS with a PING bounded by
 * REDIS_COMMAND_TIMEOUT: one that gets no answer counts the store unreachable (logged once) and
 * reconnects, so what follows fails at once until a new connection is ready; an attempt that
 * stays unready for twice REDIS_CONNECT_TIMEOUT is started again. Returns the stop of the check.
 */
const watchConnection = (
  client: RedisClient,
  address: string,
  timeouts: RedisTimeouts,
  log: (level: "warn" | "info", message: string) => void,
  now: () => number
): (() => void) => {
  // Through Sentinel the connection follows the primary: a failover is a new address (logged once).
  let primary: string | undefined
  // connecting: never connected yet; up: ready; lost: closed, reconnecting, not reported (a quick
  // reconnect says nothing); down: reported unreachable.
  let state: "connecting" | "up" | "lost" | "down" = "connecting"
  let downSince = now()
  let unreadySince = now()
  const down = (why: string) => {
    if (state === "down") return
    if (state === "up") downSince = now()
    state = "down"
    client.options.enableOfflineQueue = false
    log("warn", `store unreachable at ${address}: ${why}; retrying`)
  }
  client.on("ready", () => {
    client.options.enableOfflineQueue = true
    const at = client instanceof Redis && client.options.sentinels ? socketPeer(client) : undefined
    if (state === "down") log("info", `store reachable again after ${Math.round((now() - downSince) / 1000)} s${at === undefined ? "" : ` (primary ${at})`}`)
    else if (at !== undefined && primary !== undefined && at !== primary) {
      log("info", `store primary is now ${at} (was ${primary}) after ${Math.round((now() - downSince) / 1000)} s`)
    }
    if (at !== undefined) primary = at
    state = "up"
  })
  client.on("close", () => {
    unreadySince = now()
    if (state !== "up") return
    state = "lost"
    downSince = now()
  })
  client.on("error", (error: unknown) => down(connectionProblem(error)))
  let checking = false
  const check = () => {
    if (checking) return
    if (client.status !== "ready") {
      // An attempt that hangs (a ready check whose answer is dropped) is started again.
      if (state === "down" && now() - unreadySince >= 2 * timeouts.connectTimeoutMs) {
        unreadySince = now()
        client.disconnect(true)
      }
      return
    }
    checking = true
    client.ping().then(
      () => {
        checking = false
      },
      (error: unknown) => {
        checking = false
        if (!(error instanceof Error) || !/timed out/i.test(error.message) || client.status !== "ready") return
        down(`no answer within ${timeouts.commandTimeoutMs} ms`)
        unreadySince = now()
        client.disconnect(true)
      }
    )
  }
  const timer = setInterval(check, HEALTH_CHECK_INTERVAL_MS)
  timer.unref()
  return () => clearInterval(timer)
}

/** The address of the server a standalone connection is on (through Sentinel: the current primary). */
const socketPeer = (client: Redis): string | undefined => {
  const stream = (client as unknown as { stream?: { remoteAddress?: string; remotePort?: number } }).stream
  return stream?.remoteAddress === undefined ? undefined : `${stream.remoteAddress}:${stream.remotePort}`
}

const CLUSTER_SCHEME = /^redis-cluster:\/\//i
const SENTINEL_SCHEME = /^redis-sentinel:\/\//i

export const isSentinelUrl = (url: string) => SENTINEL_SCHEME.test(url)

/**
 * `redis-sentinel://[user:password@]host:port,host:port/NAME[?sentinelUsername=..&sentinelPassword=..]`
 * (the form REDIS_SENTINELS and its settings are turned into): the sentinels, the primary's name,
 * the data nodes' credentials and the sentinels' own.
 */
export const parseSentinelUrl = (url: string) => {
  const rest = url.replace(SENTINEL_SCHEME, "")
  const question = rest.indexOf("?")
  const query = new URLSearchParams(question >= 0 ? rest.slice(question + 1) : "")
  const path = question >= 0 ? rest.slice(0, question) : rest
  const slash = path.indexOf("/", path.lastIndexOf("@") + 1)
  const name = slash >= 0 ? decodeURIComponent(path.slice(slash + 1)) : "mymaster"
  const { nodes, username, password } = parseClusterUrl(slash >= 0 ? path.slice(0, slash) : path)
  return {
    sentinels: nodes,
    name: name === "" ? "mymaster" : name,
    username,
    password,
    sentinelUsername: query.get("sentinelUsername") ?? undefined,
    sentinelPassword: query.get("sentinelPassword") ?? undefined
  }
}

/**
 * The nodes and credentials of a `redis-cluster://[user:password@]host:port,host:port` URL (the
 * form REDIS_CLUSTER_NODES is turned into). Any reachable node is enough; ioredis finds the rest.
 */
export const parseClusterUrl = (url: string) => {
  const rest = url.replace(CLUSTER_SCHEME, "")
  const at = rest.lastIndexOf("@")
  const credentials = at >= 0 ? rest.slice(0, at) : ""
  const [username, password] = credentials.includes(":") ? credentials.split(/:(.*)/s, 2) : ["", credentials]
  const nodes = (at >= 0 ? rest.slice(at + 1) : rest)
    .split(",")
    .map((node) => node.trim().replace(/\/+$/, ""))
    .filter((node) => node.length > 0)
    .map((node) => {
      const colon = node.lastIndexOf(":")
      return colon > 0 ? { host: node.slice(0, colon), port: Number(node.slice(colon + 1)) } : { host: node, port: 6379 }
    })
  return {
    nodes,
    username: username ? decodeURIComponent(username) : undefined,
    password: password ? decodeURIComponent(password) : undefined
  }
}

export const isClusterUrl = (url: string) => CLUSTER_SCHEME.test(url)

// Fail commands quickly while Redis is away instead of queueing them for ever, and give every
// command a time limit: callers (the breaker above all) have local fallbacks and must not stall
// behind a dead or silent server.
const commandOptions = (timeouts: RedisTimeouts) =>
  ({ maxRetriesPerRequest: 2, connectTimeout: timeouts.connectTimeoutMs, commandTimeout: timeouts.commandTimeoutMs }) as const

/** A Redis connection, or a Redis Cluster client for a `redis-cluster://` URL. */
const connect = (url: string, name: string, timeouts: RedisTimeouts): RedisClient => {
  const options = commandOptions(timeouts)
  if (isSentinelUrl(url)) {
    const { sentinels, name: primaryName, username, password, sentinelUsername, sentinelPassword } = parseSentinelUrl(url)
    return new Redis({
      sentinels,
      name: primaryName,
      connectionName: name,
      ...options,
      enableAutoPipelining: true,
      // Sentinels' +switch-master reaches the connection at once, not only when the old primary stops answering.
      failoverDetector: true,
      ...(username !== undefined ? { username } : {}),
      ...(password !== undefined ? { password } : {}),
      ...(sentinelUsername !== undefined ? { sentinelUsername } : {}),
      ...(sentinelPassword !== undefined ? { sentinelPassword } : {})
    })
  }
  if (!isClusterUrl(url)) return new Redis(url, { connectionName: name, ...options, enableAutoPipelining: true })
  const { nodes, username, password } = parseClusterUrl(url)
  return new Cluster(nodes, {
    enableAutoPipelining: true,
    scaleReads: "master",
    redisOptions: {
      connectionName: name,
      ...options,
      ...(username !== undefined ? { username } : {}),
      ...(password !== undefined ? { password } : {})
    }
  })
}

/** A further connection like `client`, with `options` (a Cluster's apply to each node's connection). */
export const duplicateClient = (
  client: RedisClient,
  options: { readonly connectionName: string; readonly enableOfflineQueue?: boolean; readonly autoResendUnfulfilledCommands?: boolean }
): RedisClient =>
  client instanceof Cluster
    ? client.duplicate(undefined, {
        ...(options.enableOfflineQueue !== undefined ? { enableOfflineQueue: options.enableOfflineQueue } : {}),
        redisOptions: { ...client.options.redisOptions, ...options }
      })
    : client.duplicate({ ...options })

/** Opens a connection; `report`: log its state changes and check it answers (the main connection only, so each change is one line). */
const open = (url: string, name: string, report: boolean, timeouts: RedisTimeouts) =>
  Effect.acquireRelease(
    Effect.sync(() => ({ client: connect(url, name, timeouts), stop: [] as Array<() => void> })),
    ({ client, stop }) =>
      Effect.promise(() => {
        for (const f of stop) f()
        return client.quit().then(
          () => undefined,
          () => client.disconnect()
        )
      })
  ).pipe(
    Effect.tap(({ client, stop }) =>
      Effect.gen(function* () {
        // ioredis emits "error" for every failed reconnect; without a listener Node would crash.
        client.on("error", () => {})
        if (!report) return
        const runtime = yield* Effect.runtime<never>()
        const runLog = Runtime.runSync(runtime)
        const clock = yield* Effect.clock
        stop.push(
          watchConnection(
            client,
            redisAddress(url),
            timeouts,
            (level, message) => runLog(level === "warn" ? Effect.logWarning(message) : Effect.logInfo(message)),
            () => clock.unsafeCurrentTimeMillis()
          )
        )
      })
    ),
    Effect.map(({ client }) => client)
  )

export const makeRedisConnection = (
  url: string,
  keyPrefix = "callgate:",
  timeouts: RedisTimeouts = DEFAULT_REDIS_TIMEOUTS,
  replication: { readonly waitReplicas: WaitReplicas; readonly waitTimeoutMs: number } = { waitReplicas: "auto", waitTimeoutMs: 500 }
) =>
  Effect.gen(function* () {
    const client = yield* open(url, "callgate", true, timeouts)
    const duplicate = open(url, "callgate-sub", false, timeouts)
    // WAIT blocks the connection it is sent on: it gets one of its own (RedisReplication).
    const replicated =
      replication.waitReplicas === 0
        ? () => Effect.void
        : makeReplicated(client, yield* open(url, "callgate-wait", false, timeouts), keyPrefix, replication.waitReplicas, replication.waitTimeoutMs, clockReader(yield* Effect.clock))
    return RedisConnection.of({ client, duplicate, keys: makeKeys(keyPrefix), replicated })
  })

/**
 * Whether the store can serve: a Redis answers PING; a Redis Cluster also reports
 * `cluster_state:ok` (a cluster that lost a slot's primary answers PING but refuses the slot).
 */
export const redisHealth = (client: RedisClient) =>
  Effect.gen(function* () {
    yield* redisCall("ping", () => client.ping())
    if (!(client instanceof Cluster)) return
    const info = yield* redisCall("cluster.info", () => client.cluster("INFO") as Promise<string>)
    if (!/^cluster_state:ok\s*$/m.test(info)) {
      return yield* Effect.fail(new StoreError({ operation: "cluster.info", cause: new Error("the cluster reports cluster_state:fail") }))
    }
  })

/** Connects to `REDIS_URL` (a Redis Cluster for `redis-cluster://` or REDIS_CLUSTER_NODES); only built when it is set. */
export const RedisConnectionLive = Layer.scoped(
  RedisConnection,
  Effect.gen(function* () {
    const config = yield* AppConfig
    const url = Option.getOrThrowWith(config.redisUrl, () => new Error("REDIS_URL is not set"))
    return yield* makeRedisConnection(Redacted.value(url), config.redisKeyPrefix, {
      commandTimeoutMs: Duration.toMillis(config.redisCommandTimeout),
      connectTimeoutMs: Duration.toMillis(config.redisConnectTimeout)
    }, {
      waitReplicas: config.redisWaitReplicas,
      waitTimeoutMs: Duration.toMillis(config.redisWaitTimeout)
    })
  })
)

const UNREACHABLE_MESSAGES = /enableOfflineQueue|max retries per request|Connection is closed/i

/** Runs an ioredis call as an Effect, mapping rejections to a StoreError that carries no data. */
export const redisCall = <A>(operation: string, run: () => Promise<A>) =>
  Effect.tryPromise({
    try: run,
    catch: (cause) =>
      new StoreError({
        operation,
        // ioredis's words for "refused at once because the connection is down" (see watchConnection),
        // "gave up reconnecting for this command" and "the connection closed under it".
        cause: cause instanceof Error && UNREACHABLE_MESSAGES.test(cause.message) ? new Error(STORE_UNREACHABLE) : cause
      })
  })

/**
 * SUBSCRIBEs to `channel` on a connection of its own (`duplicate`: SUBSCRIBE takes a connection
 * over) that closes with the caller's scope; a failed attempt closes it at once rather than leaving
 * it open in the caller's scope. `onMessage` hears each message of the channel.
 */
export const subscribeOwn = (
  duplicate: RedisConnectionShape["duplicate"],
  operation: string,
  channel: string,
  onMessage: (message: string) => void
): Effect.Effect<void, StoreError, Scope.Scope> =>
  Effect.gen(function* () {
    const attempt = yield* Effect.flatMap(Effect.scope, (scope) => Scope.fork(scope, ExecutionStrategy.sequential))
    yield* Effect.gen(function* () {
      const subscriber = yield* duplicate
      subscriber.on("message", (from: string, message: string) => {
        if (from === channel) onMessage(message)
      })
      yield* redisCall(operation, () => subscriber.subscribe(channel)).pipe(
        // Its own connection never came up: the store is unreachable, which the main connection
        // reports (once); whatever ioredis's words for it (a refusal, a command timed out while connecting).
        Effect.mapError((error) =>
          subscriber.status === "ready" || error.unreachable ? error : new StoreError({ operation, cause: new Error(STORE_UNREACHABLE) })
        )
      )
    }).pipe(
      Scope.extend(attempt),
      Effect.onError((cause) => Scope.close(attempt, Exit.failCause(cause)))
    )
  })

/** A Clock read synchronously, for callbacks outside any effect. */
const clockReader = (clock: Clock.Clock) => () => clock.unsafeCurrentTimeMillis()
