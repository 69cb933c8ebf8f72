import { Either, ParseResult, Schema } from "effect"
import { CloseCode, closeReason } from "./WireSocket.js"

/** Why a frame was refused: the close code and a reason the peer can act on. */
export interface FrameProblem {
  readonly code: number
  readonly reason: string
}

const clip = (text: string, max = 40) => (text.length > max ? `${text.slice(0, max)}...` : text)

const describe = (error: ParseResult.ParseError): string => {
  const issue = ParseResult.ArrayFormatter.formatErrorSync(error)[0]
  if (issue === undefined) return "invalid frame"
  const where = issue.path.length > 0 ? issue.path.join(".") : "frame"
  const what = issue._tag === "Missing" ? "is required" : issue.message
  return `${where} ${what}`
}

/** Parses a text frame as JSON; `undefined` when it is not JSON (JSON itself has no undefined). */
export const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/**
 * A decoder for one dialect, compiled once: separates "not JSON" (1007), "no event" (1007),
 * "unknown event" (1003) and "known event, wrong shape" (1007, naming the field), so a peer is
 * told exactly what was wrong. Not used for media frames on the hot path: those go through a
 * precompiled `Schema.is` guard first.
 */
export const makeFrameDecoder = <A, I>(dialect: string, schema: Schema.Schema<A, I>, events: ReadonlySet<string>) => {
  const decode = Schema.decodeUnknownEither(schema)
  return (raw: unknown): Either.Either<A, FrameProblem> => {
    if (raw === undefined) return Either.left({ code: CloseCode.invalidPayload, reason: `${dialect}: frame is not valid JSON` })
    const event = typeof raw === "object" && raw !== null ? (raw as { event?: unknown }).event : undefined
    if (typeof event !== "string") {
      return Either.left({ code: CloseCode.invalidPayload, reason: `${dialect}: frame has no "event" string` })
    }
    if (!events.has(event)) {
      return Either.left({ code: CloseCode.unsupportedData, reason: closeReason(`${dialect}: unknown event "${clip(event)}"`) })
    }
    return Either.mapLeft(decode(raw), (error) => ({
      code: CloseCode.invalidPayload,
      reason: closeReason(`${dialect}: malformed ${event} frame: ${describe(error)}`)
    }))
  }
}
