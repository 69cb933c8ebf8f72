import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { agentMediaScanner, isAgentMediaFrame } from "../../src/agent/AgentDialect.js"
import { parseJson } from "../../src/wire/FrameDecoding.js"
import { isCallerTrack, MAX_MEDIA_PAYLOAD_CHARS } from "../../src/wire/MediaFields.js"
import { makeMediaScanner, type MediaScanner } from "../../src/wire/MediaScanner.js"
import { isTelnyxMediaFrame, telnyxMediaScanner } from "../../src/wire/TelnyxFrames.js"
import { isTwilioMediaFrame, twilioInboundEncoder, twilioMediaScanner, twilioOutboundEncoder } from "../../src/wire/TwilioFrames.js"

/**
 * The media fast path against the full parse: for every generated frame the scanner recognises,
 * JSON.parse + the schema guard must accept it too and read the same payload, track and stream
 * id (and chunk); every frame it does not recognise takes the full parse, which is the code path
 * that was there before. The generators aim at the edges: canonical frames with values at and
 * past each field's limits, the same objects re-serialised with keys reordered, extra fields,
 * whitespace and escapes, single-character mutations of canonical frames, unicode, and frames
 * that carry a whole media frame inside a string.
 */

const RUNS = 12_000

interface Dialect {
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

interface CanonicalFields {
  readonly sequence: string
  readonly track: string
  readonly chunk: string
  readonly timestamp: string
  readonly payload: string
  readonly stream: string
  readonly withStream: boolean
}

const dialects: ReadonlyArray<Dialect> = [
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

const track = fc.oneof(fc.constantFrom("inbound", "outbound", "inbound_track", "outbound_track", "", "Inbound", "inbound "), plainText(20))

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

const stream = fc.oneof({ weight: 4, arbitrary: fc.constantFrom("MZ0123456789abcdef", "4f6ed0b2-57a3-11ef-9b5c-02420a0b0c0d") }, { weight: 2, arbitrary: plainText(30) })

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
const wellFormed: fc.Arbitrary<CanonicalFields> = fc.record({
  sequence: digitString(1, 6),
  track: fc.constantFrom("inbound", "outbound", "inbound_track"),
  chunk: digitString(1, 6),
  timestamp: digitString(1, 8),
  payload: fc.uint8Array({ minLength: 0, maxLength: 240 }).map((bytes) => Buffer.from(bytes).toString("base64")),
  stream: fc.constantFrom("MZ0123456789abcdef", "4f6ed0b2-57a3-11ef-9b5c-02420a0b0c0d"),
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

const frames = (dialect: Dialect) =>
  fc.oneof(
    { weight: 3, arbitrary: wellFormed.map(dialect.canonical) },
    { weight: 4, arbitrary: fields.map(dialect.canonical) },
    { weight: 3, arbitrary: reshaped(dialect) },
    { weight: 3, arbitrary: mutated(dialect) },
    { weight: 1, arbitrary: fc.json({ maxDepth: 3 }) },
    { weight: 1, arbitrary: fc.string({ maxLength: 80 }) }
  )

/** What the full parse reads from a media frame, or undefined when it is not one. */
const fullParse = (dialect: Dialect, text: string) => {
  const raw = parseJson(text)
  if (!dialect.guard(raw)) return undefined
  const frame = raw as Record<string, any>
  return {
    payload: frame.media.payload as string,
    track: frame.media.track as string | undefined,
    stream: dialect.streamField === undefined ? undefined : (frame[dialect.streamField] as string | undefined),
    chunk: frame.media.chunk as string | number | undefined
  }
}

describe("media scanner vs the full parse", () => {
  for (const dialect of dialects) {
    it(`${dialect.name}: every recognised frame reads exactly as the full parse reads it (${RUNS} frames)`, () => {
      let recognised = 0
      let fallback = 0
      let fallbackMedia = 0
      fc.assert(
        fc.property(frames(dialect), (text) => {
          const full = fullParse(dialect, text)
          if (!dialect.scanner.scan(text)) {
            fallback++
            if (full !== undefined) fallbackMedia++
            return
          }
          recognised++
          const scanned = dialect.scanner.result
          expect(full, text.slice(0, 200)).toBeDefined()
          expect(scanned.payload(text)).toBe(full!.payload)
          expect(scanned.isCallerTrack(text)).toBe(isCallerTrack(full!.track))
          if (dialect.hasTrack) expect(text.slice(scanned.trackStart, scanned.trackEnd)).toBe(full!.track)
          if (dialect.streamField !== undefined) {
            expect(scanned.hasStream).toBe(true)
            expect(text.slice(scanned.streamStart, scanned.streamEnd)).toBe(full!.stream)
            for (const expected of [full!.stream!, `${full!.stream}x`, full!.stream!.slice(1), ""]) {
              expect(scanned.isStream(text, expected)).toBe(full!.stream === expected)
            }
          }
          if (dialect.hasChunk) expect(scanned.chunk).toBe(Number(full!.chunk))
        }),
        { numRuns: RUNS, seed: 16_016, endOnFailure: true }
      )
      // Every branch was exercised: recognised frames, fallbacks, and media frames that only the full parse accepts.
      expect(recognised).toBeGreaterThan(RUNS / 10)
      expect(fallback).toBeGreaterThan(RUNS / 10)
      expect(fallbackMedia).toBeGreaterThan(RUNS / 50)
    })
  }

  it("recognises the frames callgate and its simulators write", () => {
    const payload = Buffer.alloc(160, 0x7f).toString("base64")
    const toAgent = twilioInboundEncoder("MZabc").media(7, 6, 120, payload)
    expect(twilioMediaScanner.scan(toAgent)).toBe(true)
    expect(twilioMediaScanner.result.payload(toAgent)).toBe(payload)
    expect(twilioMediaScanner.result.isStream(toAgent, "MZabc")).toBe(true)
    const toTwilio = twilioOutboundEncoder("MZabc").media(payload)
    expect(agentMediaScanner.scan(toTwilio)).toBe(true)
    expect(agentMediaScanner.result.payload(toTwilio)).toBe(payload)
    const telnyx = `{"event":"media","sequence_number":"4","media":{"track":"inbound","chunk":"0002","timestamp":"5","payload":"${payload}"},"stream_id":"32DE0DEA-53CB"}`
    expect(telnyxMediaScanner.scan(telnyx)).toBe(true)
    expect(telnyxMediaScanner.result.chunk).toBe(2)
  })

  it("refuses templates whose fields are not JSON string contents", () => {
    expect(() => makeMediaScanner(`{"n":<digits:skip>,"p":"<payload:payload>"}`)).toThrow(/between quotes/)
    expect(() => makeMediaScanner(`{"n":"<digits:skip>"}`)).toThrow(/no payload/)
  })
})
