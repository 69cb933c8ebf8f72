import { Schema } from "effect"

/**
 * Field schemas shared by the Twilio, Telnyx and agent dialects. A media payload is forwarded by
 * pasting it between two string halves of a JSON frame, so it must be plain base64: the pattern
 * is what makes that safe (no quote or backslash can get through).
 */
export const MAX_MEDIA_PAYLOAD_CHARS = 60_000

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/

export const Base64Payload = Schema.String.pipe(
  Schema.maxLength(MAX_MEDIA_PAYLOAD_CHARS, { message: () => "media payload is too long" }),
  Schema.pattern(BASE64, { message: () => "media payload must be base64" })
)

export const DtmfDigit = Schema.String.pipe(
  Schema.pattern(/^[0-9A-Da-d*#]$/, { message: () => "dtmf digit must be one of 0-9, *, #, A-D" })
)

const MAX_MARK_NAME = 256
export const MarkName = Schema.String.pipe(Schema.maxLength(MAX_MARK_NAME, { message: () => `mark name is longer than ${MAX_MARK_NAME} characters` }))
/** `Schema.is(MarkName)`, for the hand-written mark guards. */
export const isMarkName = (value: unknown): value is string => typeof value === "string" && value.length <= MAX_MARK_NAME

/** Carriers send numbers as strings ("sequenceNumber": "3"); accept either form. */
export const NumberLike = Schema.Union(Schema.String.pipe(Schema.maxLength(20)), Schema.Number)

/** Bytes the largest accepted payload decodes to: the size of the relay's reused audio buffer. */
export const MAX_MEDIA_BYTES = Math.ceil((MAX_MEDIA_PAYLOAD_CHARS * 3) / 4)

/**
 * Hot-path twins of the field schemas above, for the media frame guards (a frame every 20 ms per
 * direction per call, where Schema.is costs more than the JSON.parse before it). They accept
 * exactly what the schemas accept; test/telephony/streams/frames.test.ts holds them to that.
 */
export const isBase64Payload = (value: unknown): value is string =>
  typeof value === "string" && value.length <= MAX_MEDIA_PAYLOAD_CHARS && BASE64.test(value)

export const isNumberLike = (value: unknown): boolean => (typeof value === "string" && value.length <= 20) || typeof value === "number"

/**
 * A media frame's timestamp (ms since the stream began) as a number; -1 when it is absent or not
 * a whole number of ms the recorder can place (docs/recording.md, "What is recorded, and the format").
 */
export const timestampOf = (value: string | number | undefined): number => {
  if (value === undefined) return -1
  const ms = typeof value === "number" ? value : value.length > 0 ? Number(value) : Number.NaN
  return Number.isSafeInteger(ms) && ms >= 0 ? ms : -1
}

/** Media of the caller's own track: carriers name it "inbound" or "inbound_track", or leave it out. */
export const isCallerTrack = (track: string | undefined): boolean =>
  track === undefined || track === "inbound" || track === "inbound_track"

export const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * Whether every character of `text` is ASCII. The encoders check their media frames' fixed parts
 * once per stream: with a base64 payload between them, such frames go out through
 * WireSocket.sendAscii.
 */
const ASCII = /^[\x00-\x7f]*$/
export const isAscii = (text: string): boolean => ASCII.test(text)
