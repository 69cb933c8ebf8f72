import { Duration, Effect, Schedule } from "effect"
import type { Counter, Histogram, Registry } from "prom-client"
import { counterOn, histogramOn } from "../observability/Metrics.js"
import { CarrierError, type Provider } from "../kernel/Carrier.js"

/**
 * How one failed carrier REST request is read. Shared by the Twilio and Telnyx adapters so both
 * answer "call already ended", throttling and outages the same way.
 * - `ended`: the call is already over (or unknown to the carrier): the request's goal is met.
 * - `unsent`: the carrier did not act on it (429, 503, connection refused): repeating is safe.
 * - `transient`: it may or may not have been acted on (other 5xx, timeouts, resets).
 * - `permanent`: repeating cannot help (4xx, bad credentials, bad input).
 */
export type FailureKind = "ended" | "unsent" | "transient" | "permanent"

export interface ClassifiedFailure {
  readonly kind: FailureKind
  readonly status?: number | undefined
  /** Safe to log: never contains credentials or request headers. */
  readonly detail: string
}

/** Errors that mean the request never reached a server that could act on it. */
const UNSENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT"])
/** Errors after which the request may have been processed. */
const TRANSIENT_CODES = new Set(["ECONNRESET", "ETIMEDOUT", "ECONNABORTED", "EPIPE", "UND_ERR_SOCKET", "UND_ERR_HEADERS_TIMEOUT"])

/** The first `code` on an error or its causes (fetch and axios nest the socket error). */
export const networkErrorCode = (error: unknown): string | undefined => {
  let current: unknown = error
  for (let depth = 0; depth < 5 && typeof current === "object" && current !== null; depth++) {
    const code = (current as { code?: unknown }).code
    if (typeof code === "string" && /^[A-Z_]+$/.test(code)) return code
    current = (current as { cause?: unknown }).cause
  }
  return undefined
}

/** Classifies a failure that produced no HTTP response. */
export const classifyNetworkFailure = (error: unknown, timedOut = false): ClassifiedFailure => {
  const code = networkErrorCode(error)
  if (code !== undefined && UNSENT_CODES.has(code)) return { kind: "unsent", detail: `connection failed (${code})` }
  if (timedOut || code === "ETIMEDOUT" || code === "ECONNABORTED") return { kind: "transient", detail: "request timed out" }
  if (code !== undefined && TRANSIENT_CODES.has(code)) return { kind: "transient", detail: `connection error (${code})` }
  return { kind: "transient", detail: code !== undefined ? `network error (${code})` : "network error" }
}

/** Classifies an HTTP error status; `ended` is decided by the carrier-specific caller first. */
export const classifyStatus = (status: number, detail: string): ClassifiedFailure => {
  if (status === 429 || status === 503) return { kind: "unsent", status, detail }
  if (status >= 500) return { kind: "transient", status, detail }
  return { kind: "permanent", status, detail }
}

/** A short, log-safe excerpt of a carrier's error text. */
export const clip = (text: unknown, max = 200): string => {
  const value = typeof text === "string" ? text : text === undefined || text === null ? "" : String(text)
  return value.length > max ? `${value.slice(0, max)}...` : value
}

/**
 * The brief retry every carrier request gets: up to 3 attempts, 100 ms then 200 ms (jittered),
 * well inside the time a waiting caller tolerates.
 */
export const carrierRetrySchedule = Schedule.exponential(Duration.millis(100), 2).pipe(
  Schedule.jittered,
  Schedule.intersect(Schedule.recurs(2))
)

export interface CarrierInstruments {
  readonly requests: Counter<"provider" | "operation" | "outcome">
  readonly duration: Histogram<"provider" | "operation">
}

/** Gets or registers the carrier request metrics on the registry (both adapters share them). */
export const carrierInstruments = (registry: Registry): CarrierInstruments => {
  const existing = registry.getSingleMetric("callgate_carrier_requests_total")
  if (existing !== undefined) {
    return {
      requests: existing as Counter<"provider" | "operation" | "outcome">,
      duration: registry.getSingleMetric("callgate_carrier_request_duration_seconds") as Histogram<"provider" | "operation">
    }
  }
  return {
    requests: counterOn(registry, "callgate_carrier_requests_total", "Carrier REST requests by provider, operation and outcome (ok, ended, error)", ["provider", "operation", "outcome"]),
    duration: histogramOn(registry, "callgate_carrier_request_duration_seconds", "Carrier REST request duration, each attempt, by provider and operation", ["provider", "operation"], [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10])
  }
}

export interface CarrierRequestSpec<A> {
  readonly provider: Provider
  readonly operation: string
  readonly callId: string
  /**
   * Whether repeating the request after an ambiguous failure (timeout, 500) is harmless: true for
   * hang-ups and for Telnyx commands carrying a command_id; false for call updates with TwiML.
   */
  readonly idempotent: boolean
  /** One attempt; fails with the classified failure. */
  readonly attempt: Effect.Effect<A, ClassifiedFailure>
}

/**
 * Runs a carrier request with the shared policy: retries where safe, "call already ended" counts as
 * done, every other failure becomes a CarrierError (never a defect), and each outcome is counted.
 */
export const runCarrierRequest = <A>(instruments: CarrierInstruments, spec: CarrierRequestSpec<A>): Effect.Effect<void, CarrierError> =>
  runRequest(instruments, spec, () => Effect.void).pipe(Effect.asVoid)

/**
 * The same policy for a request whose answer is needed (placing a call): "ended" is no success
 * here (there is no call yet to have ended), so it fails like any refusal.
 */
export const runCarrierRequestFor = <A>(instruments: CarrierInstruments, spec: CarrierRequestSpec<A>): Effect.Effect<A, CarrierError> =>
  runRequest(instruments, spec, (failure) =>
    Effect.fail(
      new CarrierError({ provider: spec.provider, operation: spec.operation, status: failure.status, detail: failure.detail, retryable: false })
    )
  )

const runRequest = <A, B>(
  instruments: CarrierInstruments,
  spec: CarrierRequestSpec<A>,
  onEnded: (failure: ClassifiedFailure) => Effect.Effect<B, CarrierError>
): Effect.Effect<A | B, CarrierError> => {
  const labels = { provider: spec.provider, operation: spec.operation }
  const timedAttempt = Effect.suspend(() => {
    const stop = instruments.duration.startTimer(labels)
    return spec.attempt.pipe(Effect.ensuring(Effect.sync(() => stop())))
  })
  return timedAttempt.pipe(
    Effect.retry({
      schedule: carrierRetrySchedule,
      while: (failure) => failure.kind === "unsent" || (failure.kind === "transient" && spec.idempotent)
    }),
    Effect.matchEffect({
      onSuccess: (answer) => Effect.sync(() => (instruments.requests.inc({ ...labels, outcome: "ok" }), answer)),
      onFailure: (failure): Effect.Effect<A | B, CarrierError> => {
        if (failure.kind === "ended") {
          instruments.requests.inc({ ...labels, outcome: "ended" })
          return Effect.logDebug("carrier: call already ended, nothing to do", { ...labels, callId: spec.callId }).pipe(
            Effect.zipRight(onEnded(failure))
          )
        }
        instruments.requests.inc({ ...labels, outcome: "error" })
        const error = new CarrierError({
          provider: spec.provider,
          operation: spec.operation,
          status: failure.status,
          detail: failure.detail,
          retryable: failure.kind !== "permanent"
        })
        return Effect.logWarning("carrier request failed", { ...labels, callId: spec.callId, status: failure.status, detail: failure.detail }).pipe(
          Effect.zipRight(Effect.fail(error))
        )
      }
    })
  )
}
