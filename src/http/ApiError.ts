import { type ParseResult, Schema } from "effect"
import { fieldProblems } from "./ValidationMessages.js"

/**
 * Every error the HTTP edge answers with, in one place: a stable code, its status, and the sentence
 * shown when no more specific one is given. Clients match on `code`, never on `message`.
 */
export const ErrorCodes = {
  VALIDATION_FAILED: { status: 400, message: "The request is not valid." },
  MALFORMED_JSON: { status: 400, message: "The request body is not valid JSON." },
  UNAUTHORIZED: { status: 401, message: "A valid API key is required: send Authorization: Bearer <key>." },
  FORBIDDEN: { status: 403, message: "This API key may not act for this agent." },
  NOT_FOUND: { status: 404, message: "No such resource." },
  ROUTE_NOT_FOUND: { status: 404, message: "No such route." },
  CONFLICT: { status: 409, message: "The request conflicts with the resource's current state." },
  PAYLOAD_TOO_LARGE: { status: 413, message: "The request body is too large." },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, message: "Send the request body as application/json." },
  RATE_LIMITED: { status: 429, message: "Too many requests: slow down and retry later." },
  INTERNAL: { status: 500, message: "Something went wrong on our side." },
  CARRIER_ERROR: { status: 502, message: "The carrier refused the request." },
  UNAVAILABLE: { status: 503, message: "A backing service is unavailable; retry later." }
} as const
export type ErrorCode = keyof typeof ErrorCodes

export const ErrorDetail = Schema.Struct({ field: Schema.String, message: Schema.String })

/** The error envelope: `{"error": {"code", "message", "details"}}`. */
export const ErrorBody = Schema.Struct({
  error: Schema.Struct({
    code: Schema.String,
    message: Schema.String,
    details: Schema.Array(ErrorDetail)
  })
}).annotations({ identifier: "Error" })

export class ApiError extends Schema.TaggedError<ApiError>()("ApiError", {
  code: Schema.String,
  status: Schema.Number,
  message: Schema.String,
  details: Schema.Array(ErrorDetail)
}) {
  static of(code: ErrorCode, message?: string, details: ReadonlyArray<{ field: string; message: string }> = []) {
    return new ApiError({ code, status: ErrorCodes[code].status, message: message ?? ErrorCodes[code].message, details })
  }
  toBody() {
    return { error: { code: this.code, message: this.message, details: this.details } }
  }
}

/**
 * Turns a Schema decode failure into one detail per offending field, in the house style
 * (src/http/ValidationMessages.ts); the message is the first detail as one sentence.
 */
export const fromParseError = (where: "body" | "query" | "params", error: ParseResult.ParseError): ApiError => {
  const details = fieldProblems(where, error)
  const first = details[0]
  return ApiError.of("VALIDATION_FAILED", first ? `${first.field} ${first.message}` : undefined, details)
}
