import { Cause, Context, FiberRef, FiberRefs, HashMap, Layer, Logger, LogLevel, Tracer } from "effect"
import type { LogLevelName } from "../config/AppConfig.js"

/**
 * Field names whose values never reach a log line. Matching is on the key, case-insensitively, so
 * `webhookSecret`, `Authorization` and `TELNYX_API_KEY` are all caught wherever they are nested.
 */
const SENSITIVE_KEY = /secret|authorization|password|token|api[-_]?key|signature|cookie/i
const SECRET_VALUE = /whsec_[A-Za-z0-9+/=]+|Bearer\s+\S+/g

export const redact = (value: unknown, depth = 0): unknown => {
  if (typeof value === "string") return value.replace(SECRET_VALUE, "[redacted]")
  if (value === null || typeof value !== "object" || depth > 6) return value
  if (value instanceof Error) return { name: value.name, message: redact(value.message) }
  if (Array.isArray(value)) return value.map((item) => redact(item, depth + 1))
  const out: Record<string, unknown> = {}
  for (const [key, inner] of Object.entries(value)) {
    out[key] = SENSITIVE_KEY.test(key) ? "[redacted]" : redact(inner, depth + 1)
  }
  return out
}

const toLogLevel = (name: LogLevelName): LogLevel.LogLevel =>
  ({
    trace: LogLevel.Trace,
    debug: LogLevel.Debug,
    info: LogLevel.Info,
    warn: LogLevel.Warning,
    error: LogLevel.Error,
    fatal: LogLevel.Fatal,
    none: LogLevel.None
  })[name]

/** The first line of an error's message, and of its cause's (e.g. "connect ECONNREFUSED 127.0.0.1:6379"). */
const oneLine = (error: unknown): string => {
  if (typeof error !== "object" || error === null) return String(error)
  const tag = "_tag" in error ? String(error._tag) : error instanceof Error ? error.name : "Error"
  const message = error instanceof Error || "message" in error ? String((error as { message: unknown }).message).split("\n")[0] : ""
  const inner = "cause" in error && error.cause !== undefined ? oneLine(error.cause) : ""
  return `${tag}: ${message}${inner.length > 0 ? ` (${inner})` : ""}`
}

/**
 * Expected failures (a Cause with failures and no defects: a store that is down, a refused
 * request) are one line each, without a stack trace; defects and interruptions keep Effect's full
 * rendering, stack included.
 */
const renderCause = (cause: Cause.Cause<unknown>): string => {
  const failures = [...Cause.failures(cause)]
  if (failures.length > 0 && [...Cause.defects(cause)].length === 0 && !Cause.isInterrupted(cause)) {
    return failures.map(oneLine).join("; ")
  }
  return Cause.pretty(cause, { renderErrorCause: true })
}

/**
 * One JSON object per line on stdout: time, level, msg, the trace and span ids of the current span
 * (a call's lines carry its trace: docs/observability.md), annotations, cause.
 */
export const jsonLogger = (write: (line: string) => void = (line) => process.stdout.write(line + "\n")) =>
  Logger.make(({ annotations, cause, context, date, logLevel, message }) => {
    const messages = Array.isArray(message) ? message : [message]
    const record: Record<string, unknown> = {
      time: date.toISOString(),
      level: logLevel.label.toLowerCase(),
      msg: redact(typeof messages[0] === "string" ? messages[0] : JSON.stringify(redact(messages[0])))
    }
    const span = Context.getOption(FiberRefs.getOrDefault(context, FiberRef.currentContext), Tracer.ParentSpan)
    if (span._tag === "Some") {
      record.traceId = span.value.traceId
      record.spanId = span.value.spanId
    }
    for (const extra of messages.slice(1)) Object.assign(record, redact(extra) as object)
    for (const [key, value] of HashMap.toEntries(annotations)) {
      record[key] = SENSITIVE_KEY.test(key) ? "[redacted]" : redact(value)
    }
    if (!Cause.isEmpty(cause)) record.cause = redact(renderCause(cause))
    write(JSON.stringify(record))
  })

export const loggerLayer = (level: LogLevelName) =>
  Layer.merge(Logger.replace(Logger.defaultLogger, jsonLogger()), Logger.minimumLogLevel(toLogLevel(level)))
