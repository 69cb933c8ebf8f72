/**
 * Generated text frames for the media fast path's tests (MediaScanner.test.ts, and the stream
 * legs' fastPath.test.ts): canonical frames with values at and past each field's limits, the
 * same objects re-serialised with keys reordered, extra fields, whitespace and escapes,
 * single-character mutations of canonical frames, unicode, frames that carry a whole media frame
 * inside a string, and arbitrary JSON and text.
 */
import fc from "fast-check"
import { agentMediaScanner, isAgentMediaFrame } from "../../src/frames/AgentDialect.js"
import { MAX_MEDIA_PAYLOAD_CHARS } from "../../src/frames/MediaFields.js"
import type { MediaScanner } from "../../src/frames/MediaScanner.js"
import { isTelnyxMediaFrame, telnyxMediaScanner } from "../../src/frames/TelnyxFrames.js"
import { isTwilioMediaFrame, twilioMediaScanner } from "../../src/frames/TwilioFrames.js"

/** The stream ids most generated frames name (tests open their streams with these). */
export const TWILIO_STREAM_SID = "MZ0123456789abcdef"
export const TELNYX_STREAM_ID = "4f6ed0b2-57a3-11ef-9b5c-02420a0b0c0d"

export interface Dialect {
  readonly name: string
  readonly scanner: MediaScanner
  readonly guard: (raw: unknown) => boolean
  /** The media object's fields and the top-level ones, as the dialect writes them. */
  readonly canonical: (fields: CanonicalFields) => string
  readonly object: (fields: CanonicalFields) => Record<string, unknown>
  readonly streamField: string | undefined
  readonly hasTrack: boolean
  readonly hasChunk: boolean
}

export interface CanonicalFields {
  readonly sequence: string
  readonly track: string
  readonly chunk: string
  readonly timestamp: string
  readonly payload: string
  readonly stream: string
  readonly withStream: boolean
}

export const dialects: ReadonlyArray<Dialect> = [
  {
    name: "twilio",
    scanner: twilioMediaScanner,
    guard: isTwilioMediaFrame,
    canonical: (f) =>
      `{"event":"media","sequenceNumber":"${f.sequence}","media":{"track":"${f.track}","chunk":"${f.chunk}","timestamp":"${f.timestamp}","payload":"${f.payload}"},"streamSid":"${f.stream}"}`,
    object: (f) => ({
      event: "media",
      sequenceNumber: f.sequence,
      media: { track: f.track, chunk: f.chunk, timestamp: f.timestamp, payload: f.payload },
      streamSid: f.stream
    }),
    streamField: "streamSid",
    hasTrack: true,
    hasChunk: false
  },
  {
    name: "telnyx",
    scanner: telnyxMediaScanner,
    guard: isTelnyxMediaFrame,
    canonical: (f) =>
      `{"event":"media","sequence_number":"${f.sequence}","media":{"track":"${f.track}","chunk":"${f.chunk}","timestamp":"${f.timestamp}","payload":"${f.payload}"},"stream_id":"${f.stream}"}`,
    object: (f) => ({
      event: "media",
      sequence_number: f.sequence,
      media: { track: f.track, chunk: f.chunk, timestamp: f.timestamp, payload: f.payload },
      stream_id: f.stream
    }),
    streamField: "stream_id",
    hasTrack: true,
    hasChunk: true
  },
  {
    name: "agent",
    scanner: agentMediaScanner,
    guard: isAgentMediaFrame,
    canonical: (f) =>
      f.withStream
        ? `{"event":"media","streamSid":"${f.stream}","media":{"payload":"${f.payload}"}}`
        : `{"event":"media","media":{"payload":"${f.payload}"}}`,
    object: (f) => (f.withStream ? { event: "media", streamSid: f.stream, media: { payload: f.payload } } : { event: "media", media: { payload: f.payload } }),
    streamField: undefined,
    hasTrack: false,
    hasChunk: false
  }
]

// Field values: mostly valid, often at a limit, sometimes just past it or with a character JSON reads differently.

const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
const oddChars = ['"', "\\", "\u0000", "\u001f", "\u007f", "é", "€", "😀", "\ud800", " ", "=", "-", "_", "}", "{", ":", ","]

const digitString = (min: number, max: number) =>
  fc.array(fc.constantFrom(..."0123456789"), { minLength: min, maxLength: max }).map((digits) => digits.join(""))

const numberText = fc.oneof(
  { weight: 6, arbitrary: digitString(1, 6) },
  { weight: 1, arbitrary: digitString(19, 22) },
  { weight: 1, arbitrary: digitString(8, 11) },
  { weight: 1, arbitrary: fc.constantFrom("", "-1", "1.5", "1e3", " 1", "٣") },
  { weight: 1, arbitrary: fc.string({ maxLength: 22 }) }
)

const plainText = (maxLength: number) =>
  fc.oneof(
    { weight: 4, arbitrary: fc.stringMatching(/^[A-Za-z0-9_-]{0,40}$/) },
    { weight: 1, arbitrary: fc.string({ unit: "grapheme-ascii", maxLength }) },
    { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 12 }) },
    { weight: 1, arbitrary: fc.tuple(fc.stringMatching(/^[A-Za-z0-9]{0,12}$/), fc.constantFrom(...oddChars)).map(([a, b]) => a + b) }
  )

/** Text at the scanner's length limit for text fields (256), or just past it. */
const longText = fc.integer({ min: 254, max: 258 }).map((length) => "s".repeat(length))

const track = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom("inbound", "outbound", "inbound_track", "outbound_track", "", "Inbound", "inbound ") },
  { weight: 6, arbitrary: plainText(20) },
  { weight: 1, arbitrary: longText }
)

const base64Body = (maxLength: number) => fc.array(fc.constantFrom(...BASE64), { maxLength }).map((chars) => chars.join(""))

const payload = fc.oneof(
  { weight: 6, arbitrary: fc.uint8Array({ minLength: 0, maxLength: 240 }).map((bytes) => Buffer.from(bytes).toString("base64")) },
  { weight: 2, arbitrary: fc.tuple(base64Body(40), fc.constantFrom("", "=", "==", "===", "=A", "A=A")).map(([body, pad]) => body + pad) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(base64Body(40), fc.constantFrom(...oddChars, "\\/", "\\u0041", "\\n"), base64Body(40))
      .map(([a, odd, b]) => a + odd + b)
  },
  {
    weight: 1,
    arbitrary: fc.integer({ min: MAX_MEDIA_PAYLOAD_CHARS - 2, max: MAX_MEDIA_PAYLOAD_CHARS + 2 }).map((length) => "A".repeat(length))
  }
)

const stream = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(TWILIO_STREAM_SID, TELNYX_STREAM_ID) },
  { weight: 4, arbitrary: plainText(30) },
  { weight: 1, arbitrary: longText }
)

const fields: fc.Arbitrary<CanonicalFields> = fc.record({
  sequence: numberText,
  track,
  chunk: numberText,
  timestamp: numberText,
  payload,
  stream,
  withStream: fc.boolean()
})

/** Canonical frames as carriers and agents send them: the bulk of real traffic. */
export const wellFormed: fc.Arbitrary<CanonicalFields> = fc.record({
  sequence: digitString(1, 6),
  track: fc.constantFrom("inbound", "outbound", "inbound_track"),
  chunk: digitString(1, 6),
  timestamp: digitString(1, 8),
  payload: fc.uint8Array({ minLength: 0, maxLength: 240 }).map((bytes) => Buffer.from(bytes).toString("base64")),
  stream: fc.constantFrom(TWILIO_STREAM_SID, TELNYX_STREAM_ID),
  withStream: fc.boolean()
})

/** Re-serialised: keys in any order, extra fields, other value types, whitespace, escapes. */
const reshaped = (dialect: Dialect) =>
  fc
    .record({
      f: fields,
      shuffleTop: fc.boolean(),
      shuffleMedia: fc.boolean(),
      extraTop: fc.option(fc.tuple(fc.constantFrom("extra", "event", "media", "tag", "streamSid", "payload"), fc.jsonValue({ maxDepth: 1 }))),
      extraMedia: fc.option(fc.tuple(fc.constantFrom("extra", "payload", "track", "chunk"), fc.jsonValue({ maxDepth: 1 }))),
      numbers: fc.boolean(),
      indent: fc.constantFrom(undefined, 0, 1, "\t"),
      escape: fc.constantFrom("none", "slash", "unicode", "letter")
    })
    .map(({ f, shuffleTop, shuffleMedia, extraTop, extraMedia, numbers, indent, escape }) => {
      const object = dialect.object(f)
      const media = { ...(object.media as Record<string, unknown>) }
      if (numbers && "chunk" in media) media.chunk = Number(media.chunk)
      if (numbers && "timestamp" in media) media.timestamp = Number(media.timestamp)
      if (extraMedia) media[extraMedia[0]] = extraMedia[1]
      const mediaEntries = Object.entries(media)
      if (shuffleMedia) mediaEntries.reverse()
      const top: Record<string, unknown> = { ...object, media: Object.fromEntries(mediaEntries) }
      if (extraTop) top[extraTop[0]] = extraTop[1]
      const topEntries = Object.entries(top)
      if (shuffleTop) topEntries.reverse()
      let text = JSON.stringify(Object.fromEntries(topEntries), null, indent)
      if (escape === "slash") text = text.replace("/", "\\/")
      if (escape === "unicode") text = text.replace(/"payload":"([A-Za-z])/, (_all, c: string) => `"payload":"\\u00${c.charCodeAt(0).toString(16)}`)
      if (escape === "letter") text = text.replace('"media"', '"\\u006dedia"')
      return text
    })

/** One small edit of a canonical frame: most land somewhere that breaks the template, some in a value. */
const mutated = (dialect: Dialect) =>
  fc
    .record({
      f: fields,
      position: fc.nat(),
      edit: fc.constantFrom("insert", "delete", "replace", "duplicate-key", "wrap", "trailing"),
      char: fc.oneof(fc.constantFrom(...oddChars, "A", "0", " ", "\n", '"media"'), fc.string({ minLength: 1, maxLength: 2 }))
    })
    .map(({ f, position, edit, char }) => {
      const text = dialect.canonical(f)
      const at = position % (text.length + 1)
      switch (edit) {
        case "insert":
          return text.slice(0, at) + char + text.slice(at)
        case "delete":
          return text.slice(0, at) + text.slice(at + 1)
        case "replace":
          return text.slice(0, at) + char + text.slice(at + 1)
        case "duplicate-key":
          // A later duplicate wins in JSON.parse: the template must not be fooled by the first one.
          return text.slice(0, -1) + `,"media":{"payload":"AAAA"}}`
        case "wrap":
          // A whole media frame inside a string of another frame.
          return `{"event":"mark","mark":{"name":${JSON.stringify(text)}}}`
        case "trailing":
          return text + char
      }
    })

export const frames = (dialect: Dialect) =>
  fc.oneof(
    { weight: 3, arbitrary: wellFormed.map(dialect.canonical) },
    { weight: 4, arbitrary: fields.map(dialect.canonical) },
    { weight: 3, arbitrary: reshaped(dialect) },
    { weight: 3, arbitrary: mutated(dialect) },
    { weight: 1, arbitrary: fc.json({ maxDepth: 3 }) },
    { weight: 1, arbitrary: fc.string({ maxLength: 80 }) }
  )

