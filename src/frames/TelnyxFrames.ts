import { Schema } from "effect"
import { Base64Payload, DtmfDigit, isBase64Payload, isMarkName, isNumberLike, isRecord, MarkName, NumberLike } from "./MediaFields.js"
import { makeMediaScanner } from "./MediaScanner.js"

/**
 * Telnyx media streaming over WebSocket (bidirectional RTP mode): snake_case, `stream_id` at the
 * top level of every frame after `connected`, `error` frames, media `chunk` numbers that may
 * arrive out of order. Unknown extra fields are ignored.
 */
const framed = {
  sequence_number: Schema.optional(NumberLike),
  stream_id: Schema.String
}

export const TelnyxConnected = Schema.Struct({
  event: Schema.Literal("connected"),
  version: Schema.optional(Schema.String)
})

/**
 * PCMU and PCMA at 8 kHz, L16 at 8 or 16 kHz, G.722 (16 kHz audio, its rate given as 8000 or 16000)
 * (AudioFormat.telnyxAudioFormat decides what is relayed).
 */
export const TelnyxMediaFormat = Schema.Struct({
  encoding: Schema.Literal("PCMU", "audio/x-mulaw", "PCMA", "audio/x-alaw", "L16", "audio/L16", "G722", "audio/G722"),
  sample_rate: Schema.Literal(8000, 16000),
  channels: Schema.Literal(1)
})

export const TelnyxStart = Schema.Struct({
  event: Schema.Literal("start"),
  ...framed,
  start: Schema.Struct({
    user_id: Schema.optional(Schema.String),
    call_control_id: Schema.optional(Schema.String),
    call_session_id: Schema.optional(Schema.String),
    from: Schema.optional(Schema.String),
    to: Schema.optional(Schema.String),
    client_state: Schema.optional(Schema.NullOr(Schema.String)),
    custom_parameters: Schema.optional(Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown }))),
    media_format: TelnyxMediaFormat
  })
})

/** Chunk numbers count frames from 1; up to 15 digits (exact as a JavaScript number), as a string or a number. */
const MAX_CHUNK = 999_999_999_999_999

export const ChunkNumber = Schema.Union(
  Schema.String.pipe(Schema.pattern(/^\d{1,15}$/, { message: () => "chunk must be a whole number of at most 15 digits" })),
  Schema.Number.pipe(Schema.int(), Schema.between(0, MAX_CHUNK))
)

export const TelnyxMedia = Schema.Struct({
  event: Schema.Literal("media"),
  ...framed,
  media: Schema.Struct({
    track: Schema.optional(Schema.String),
    chunk: ChunkNumber,
    timestamp: Schema.optional(NumberLike),
    payload: Base64Payload
  })
})

const CHUNK_DIGITS = /^\d{1,15}$/

/** `Schema.is(TelnyxMedia)`, hand-written for the hot path (held to the schema by the frame tests). */
export const isTelnyxMediaFrame = (raw: unknown): raw is typeof TelnyxMedia.Type => {
  if (!isRecord(raw) || raw.event !== "media" || typeof raw.stream_id !== "string") return false
  const media = raw.media
  if (!isRecord(media) || !isBase64Payload(media.payload)) return false
  const chunk = media.chunk
  return (
    ((typeof chunk === "string" && CHUNK_DIGITS.test(chunk)) ||
      (typeof chunk === "number" && Number.isInteger(chunk) && chunk >= 0 && chunk <= MAX_CHUNK)) &&
    (media.track === undefined || typeof media.track === "string") &&
    (media.timestamp === undefined || isNumberLike(media.timestamp)) &&
    (raw.sequence_number === undefined || isNumberLike(raw.sequence_number))
  )
}

/**
 * The media fast path (MediaScanner.ts): a media frame exactly as Telnyx writes it, the chunk
 * number as a string of digits. Anything else takes the full parse.
 */
export const telnyxMediaScanner = makeMediaScanner(
  `{"event":"media","sequence_number":"<digits:skip>","media":{"track":"<text:track>","chunk":"<chunk:chunk>","timestamp":"<digits:timestamp>","payload":"<payload:payload>"},"stream_id":"<text:stream>"}`
)

export const TelnyxDtmf = Schema.Struct({
  event: Schema.Literal("dtmf"),
  ...framed,
  occurred_at: Schema.optional(Schema.String),
  dtmf: Schema.Struct({ digit: DtmfDigit })
})

export const TelnyxMark = Schema.Struct({
  event: Schema.Literal("mark"),
  ...framed,
  mark: Schema.Struct({ name: MarkName })
})

/** `Schema.is(TelnyxMark)`, hand-written: the echo of every mark takes it instead of the full decode. */
export const isTelnyxMarkFrame = (raw: unknown): raw is typeof TelnyxMark.Type =>
  isRecord(raw) &&
  raw.event === "mark" &&
  typeof raw.stream_id === "string" &&
  isRecord(raw.mark) &&
  isMarkName(raw.mark.name) &&
  (raw.sequence_number === undefined || isNumberLike(raw.sequence_number))

export const TelnyxStop = Schema.Struct({
  event: Schema.Literal("stop"),
  ...framed,
  stop: Schema.optional(Schema.Struct({ user_id: Schema.optional(Schema.String), call_control_id: Schema.optional(Schema.String) }))
})

export const TelnyxError = Schema.Struct({
  event: Schema.Literal("error"),
  sequence_number: Schema.optional(NumberLike),
  stream_id: Schema.optional(Schema.String),
  payload: Schema.optional(
    Schema.Struct({
      code: Schema.optional(NumberLike),
      title: Schema.optional(Schema.String),
      detail: Schema.optional(Schema.String)
    })
  )
})

/** Every frame Telnyx sends to a stream server. */
export const TelnyxInbound = Schema.Union(TelnyxConnected, TelnyxStart, TelnyxMedia, TelnyxDtmf, TelnyxMark, TelnyxStop, TelnyxError)
export type TelnyxInbound = typeof TelnyxInbound.Type
export const TELNYX_INBOUND_EVENTS: ReadonlySet<string> = new Set(["connected", "start", "media", "dtmf", "mark", "stop", "error"])

/** What a stream server may send to Telnyx in RTP bidirectional mode. */
export const TelnyxOutbound = Schema.Union(
  Schema.Struct({ event: Schema.Literal("media"), media: Schema.Struct({ payload: Base64Payload }) }),
  Schema.Struct({ event: Schema.Literal("mark"), mark: Schema.Struct({ name: MarkName }) }),
  Schema.Struct({ event: Schema.Literal("clear") })
)

/** Outbound frames as strings; the payload passed the base64 pattern, so it is pasted as is. */
export const telnyxOutboundEncoder = {
  /** The fixed parts are ASCII, so `media` frames (with a base64 payload) may go through WireSocket.sendAscii. */
  mediaIsAscii: true,
  media: (payload: string) => `{"event":"media","media":{"payload":"` + payload + `"}}`,
  mark: (name: string) => `{"event":"mark","mark":{"name":${JSON.stringify(name)}}}`,
  clear: () => `{"event":"clear"}`
} as const
