import { readFile } from "node:fs/promises"
import { createSecureContext, rootCertificates } from "node:tls"
import { ConfigError, Data, Duration, Effect, Layer, Option } from "effect"
import { Agent, errors as undiciErrors, request } from "undici"
import { AppConfig } from "../config/AppConfig.js"
import { hostRefusal } from "../egress/AddressPolicy.js"
import { guardedLookup, RefusedAddressError, type ResolvedAddress, type Resolver } from "../egress/GuardedLookup.js"

export type { ResolvedAddress }

/**
 * The only way callgate sends HTTP to customer-chosen URLs (event webhooks and error fallback
 * webhooks): https only, every resolved address checked against AddressPolicy, and the connection
 * made to the address that was checked (the check runs inside the socket's own lookup, so there is
 * no second resolution a DNS-rebinding attacker could answer differently). Redirects are never
 * followed; response bodies are read up to a limit.
 */

export type SafeHttpErrorKind = "invalid-url" | "refused-address" | "timeout" | "connection"

/** Why a request got no HTTP response. `detail` never carries secrets, headers or bodies. */
export class SafeHttpError extends Data.TaggedError("SafeHttpError")<{
  readonly kind: SafeHttpErrorKind
  readonly detail: string
  readonly cause?: unknown
}> {
  override get message() {
    return this.detail
  }
}

export interface SafePostOptions {
  readonly headers?: Readonly<Record<string, string>>
  readonly body: string | Uint8Array
  /** The whole request: connecting, sending, and reading the response. */
  readonly timeout: Duration.DurationInput
  /** Response body bytes kept (the rest is read and dropped). Default 64 KiB. */
  readonly maxResponseBytes?: number
}

export interface SafeResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string | ReadonlyArray<string>>>
  /** The first `maxResponseBytes` bytes of the body. */
  readonly body: Buffer
  readonly truncated: boolean
}

export interface SafeHttpOptions {
  /** Allow loopback, private, link-local and similar destinations (tests, local development). */
  readonly allowPrivateNetworks: boolean
  /** Extra trusted CA certificates (PEM), added to Node's built-in roots. */
  readonly ca?: string | Buffer | undefined
  /** Name resolution; default: the system resolver (dns.lookup). Tests inject one. */
  readonly resolveHost?: Resolver
  /** Keep-alive connections kept per origin. Default 32. */
  readonly connectionsPerOrigin?: number
}

export const DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024
/** Past this many body bytes the connection is dropped rather than drained. */
const DRAIN_LIMIT_BYTES = 1024 * 1024

const findInChain = (error: unknown): { refused?: RefusedAddressError; code?: string; name?: string } => {
  let current: unknown = error
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    if (current instanceof RefusedAddressError) return { refused: current }
    const code = (current as { code?: unknown }).code
    if (typeof code === "string" && code !== "UND_ERR_SOCKET") return { code, name: current.name }
    current = (current as { cause?: unknown }).cause
  }
  return current instanceof Error ? { name: current.name } : {}
}

const toSafeHttpError = (error: unknown): SafeHttpError => {
  const found = findInChain(error)
  if (found.refused) return new SafeHttpError({ kind: "refused-address", detail: found.refused.message })
  if (
    error instanceof undiciErrors.HeadersTimeoutError ||
    error instanceof undiciErrors.BodyTimeoutError ||
    error instanceof undiciErrors.ConnectTimeoutError
  ) {
    return new SafeHttpError({ kind: "timeout", detail: "the receiver did not answer in time", cause: error })
  }
  const code = found.code ?? found.name ?? "unknown error"
  return new SafeHttpError({ kind: "connection", detail: `connection failed: ${code}`, cause: error })
}

const readLimited = async (body: AsyncIterable<Buffer>, limit: number) => {
  const kept: Array<Buffer> = []
  let keptBytes = 0
  let seen = 0
  for await (const chunk of body) {
    seen += chunk.length
    if (keptBytes < limit) {
      const part = chunk.length <= limit - keptBytes ? chunk : chunk.subarray(0, limit - keptBytes)
      kept.push(part)
      keptBytes += part.length
    }
    // Draining keeps the connection reusable; a receiver sending far more loses its connection.
    if (seen > DRAIN_LIMIT_BYTES) break
  }
  return { body: Buffer.concat(kept, keptBytes), truncated: seen > keptBytes }
}

export const makeSafeHttpClient = (options: SafeHttpOptions) =>
  Effect.gen(function* () {
    const allowPrivate = options.allowPrivateNetworks
    // Called by the TLS socket itself: what is checked here is what the socket connects to.
    const lookup = guardedLookup(allowPrivate, options.resolveHost)

    // One TLS context for every connection: building one per connection re-parses every CA.
    const secureContext = createSecureContext(
      options.ca !== undefined ? { ca: [...rootCertificates, options.ca.toString()] } : {}
    )
    const agent = yield* Effect.acquireRelease(
      Effect.sync(
        () =>
          new Agent({
            connect: { lookup, secureContext },
            connections: options.connectionsPerOrigin ?? 32,
            keepAliveTimeout: 4_000,
            keepAliveMaxTimeout: 30_000
          })
      ),
      (agent) => Effect.promise(() => agent.destroy().catch(() => undefined))
    )

    /** Refusals decidable before connecting: the scheme, credentials, IP literals, special names. */
    const precheck = (text: string): Effect.Effect<URL, SafeHttpError> => {
      let url: URL
      try {
        url = new URL(text)
      } catch {
        return Effect.fail(new SafeHttpError({ kind: "invalid-url", detail: "the URL is not valid" }))
      }
      if (url.protocol !== "https:") {
        return Effect.fail(new SafeHttpError({ kind: "invalid-url", detail: "only https:// URLs are allowed" }))
      }
      if (url.username !== "" || url.password !== "") {
        return Effect.fail(new SafeHttpError({ kind: "invalid-url", detail: "URLs with credentials are not allowed" }))
      }
      // The socket skips its lookup for IP literals, so they are checked here.
      const refusal = hostRefusal(url, allowPrivate)
      if (refusal !== undefined) {
        return Effect.fail(
          new SafeHttpError({ kind: "refused-address", detail: new RefusedAddressError(refusal).message })
        )
      }
      return Effect.succeed(url)
    }

    const post = (url: string, postOptions: SafePostOptions): Effect.Effect<SafeResponse, SafeHttpError> => {
      const timeout = Duration.decode(postOptions.timeout)
      const timeoutMs = Math.max(1, Duration.toMillis(timeout))
      const limit = postOptions.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES
      return precheck(url).pipe(
        Effect.flatMap((target) =>
          Effect.tryPromise({
            try: async (signal) => {
              const response = await request(target, {
                dispatcher: agent,
                method: "POST",
                headers: { ...postOptions.headers },
                body: postOptions.body,
                signal,
                headersTimeout: timeoutMs,
                bodyTimeout: timeoutMs
              })
              const { body, truncated } = await readLimited(response.body, limit)
              return {
                status: response.statusCode,
                headers: response.headers as Record<string, string | ReadonlyArray<string>>,
                body,
                truncated
              } satisfies SafeResponse
            },
            catch: toSafeHttpError
          })
        ),
        Effect.timeoutFail({
          duration: timeout,
          onTimeout: () =>
            new SafeHttpError({ kind: "timeout", detail: `no response within ${Duration.format(timeout)}` })
        })
      )
    }

    return { post } as const
  })

const readCa = (path: Option.Option<string>) =>
  Option.match(path, {
    onNone: () => Effect.succeed(undefined),
    onSome: (file) =>
      Effect.tryPromise({
        try: () => readFile(file),
        catch: () => ConfigError.InvalidData(["WEBHOOK_CA_FILE"], `cannot read the CA file ${file}`)
      })
  })

export class SafeHttpClient extends Effect.Service<SafeHttpClient>()("callgate/SafeHttpClient", {
  scoped: Effect.gen(function* () {
    const config = yield* AppConfig
    const ca = yield* readCa(config.webhookCaFile)
    return yield* makeSafeHttpClient({ allowPrivateNetworks: config.webhookAllowPrivateNetworks, ca })
  })
}) {
  /** A client with explicit options (tests: an injected resolver). */
  static readonly layerWith = (options: SafeHttpOptions) =>
    Layer.scoped(SafeHttpClient, Effect.map(makeSafeHttpClient(options), (client) => SafeHttpClient.make(client)))
}
