import { MAX_MEDIA_PAYLOAD_CHARS } from "./MediaFields.js"

/**
 * The media fast path (docs/benchmarks.md, "Profiling"): a media frame arrives every 20 ms per
 * direction per call, and almost all of them are written byte for byte the same way by their
 * sender. A scanner recognises exactly that text (one anchored regular expression per template,
 * no captures: native code, no allocation) and reports where the fields lie in it (offsets, no
 * copies, no JSON.parse); the payload is then sliced out and pasted into the outgoing frame.
 * About 3 times faster than JSON.parse and the schema guard on a Twilio media frame.
 *
 * "Exactly" is the whole point: a frame is recognised only when its text is one fixed template
 * (keys in that order, no whitespace, no extra fields) whose values hold no character that JSON
 * would read differently from how it is written (no backslash, no control or non-ASCII
 * character) and satisfy the schema's own field rules. For such a text, JSON.parse would produce
 * exactly the values the offsets delimit, and the schema would accept them. Anything else (an
 * escape, reordered keys, an extra field, whitespace, unicode, a payload too long, a number
 * where the template has a string) is not recognised, and the caller takes the full
 * JSON.parse + Schema path, which handles it exactly as it always did.
 * test/frames/MediaScanner.test.ts compares the two on generated frames.
 */

/** What one template field may hold; each kind accepts a subset of what its schema accepts. */
type FieldKind =
  /** 1 to 20 ASCII digits: a NumberLike string (the schema allows any string of up to 20 chars). */
  | "digits"
  /** 1 to 9 ASCII digits, read as a number: a Telnyx chunk (the schema allows up to 15; longer ones take the full parse). */
  | "chunk"
  /** 0 to 256 printable ASCII characters without backslash: a plain JSON string (track, stream id). */
  | "text"
  /** Base64 (/^[A-Za-z0-9+/]*={0,2}$/), at most MAX_MEDIA_PAYLOAD_CHARS: the media payload. */
  | "payload"

/** Which result slot a field fills; "skip" checks the field and keeps nothing. */
type FieldRole = "skip" | "track" | "stream" | "chunk" | "payload" | "timestamp"

const FIELD = /<(digits|chunk|text|payload):(skip|track|stream|chunk|payload|timestamp)>/g

const MAX_DIGITS = 20
const MAX_CHUNK_DIGITS = 9
const MAX_TEXT = 256


/**
 * Where the fields of the last recognised frame lie: offsets into its text, -1 when the template
 * has no such field. One instance per scanner, overwritten by each scan (no allocation per frame);
 * read it right after a successful `scan`, before the next one.
 */
export class ScannedMedia {
  payloadStart = 0
  payloadEnd = 0
  trackStart = -1
  trackEnd = -1
  streamStart = -1
  streamEnd = -1
  /** The chunk number, for templates with a "chunk" field; -1 otherwise. */
  chunk = -1
  /** The frame's timestamp (ms since the stream began), for templates with a "timestamp" field; -1 otherwise. */
  timestamp = -1

  /** The payload as a string (a slice of the frame's text). */
  payload(text: string): string {
    return text.slice(this.payloadStart, this.payloadEnd)
  }

  /** The frame carries the caller's own track ("inbound", "inbound_track", or no track field): see isCallerTrack. */
  isCallerTrack(text: string): boolean {
    if (this.trackStart < 0) return true
    const length = this.trackEnd - this.trackStart
    return (
      (length === 7 && text.startsWith("inbound", this.trackStart)) ||
      (length === 13 && text.startsWith("inbound_track", this.trackStart))
    )
  }

  /** The frame's stream id equals `expected` (true when the template has no stream id field). */
  isStream(text: string, expected: string): boolean {
    if (this.streamStart < 0) return true
    return this.streamEnd - this.streamStart === expected.length && text.startsWith(expected, this.streamStart)
  }

  /** The frame names a stream id at all. */
  get hasStream(): boolean {
    return this.streamStart >= 0
  }
}

interface CompiledTemplate {
  /** The whole template as one anchored expression without captures: validates a frame in native code, allocating nothing. */
  readonly pattern: RegExp
  /** literals[i] precedes field i; the last literal ends the frame. */
  readonly literals: ReadonlyArray<string>
  readonly kinds: ReadonlyArray<FieldKind>
  readonly roles: ReadonlyArray<FieldRole>
  /** The most characters field i may hold. */
  readonly limits: ReadonlyArray<number>
}

/**
 * What each field kind accepts, as a character class (see FieldKind). The length limits are
 * checked on the offsets (MAX_LENGTH): counted repetitions make the expression slower (measured:
 * about 15 % of its time on a Twilio media frame).
 */
const FIELD_PATTERN: Record<FieldKind, string> = {
  digits: "[0-9]+",
  chunk: "[0-9]+",
  // Printable ASCII but the quote (which ends the field) and the backslash (which would start an escape).
  text: "[\\x20\\x21\\x23-\\x5b\\x5d-\\x7e]*",
  payload: "[A-Za-z0-9+/]*={0,2}"
}

/** The most characters each field kind may hold (the payload's limit is MAX_MEDIA_PAYLOAD_CHARS). */
const MAX_LENGTH: Record<FieldKind, number> = {
  digits: MAX_DIGITS,
  chunk: MAX_CHUNK_DIGITS,
  text: MAX_TEXT,
  payload: MAX_MEDIA_PAYLOAD_CHARS
}

const escapeRegExp = (text: string) => text.replace(/[\\^$.*+?()[\]{}|/]/g, "\\$&")

const compile = (template: string): CompiledTemplate => {
  const literals: Array<string> = []
  const kinds: Array<FieldKind> = []
  const roles: Array<FieldRole> = []
  let last = 0
  for (const match of template.matchAll(FIELD)) {
    const literal = template.slice(last, match.index)
    // Every field is a JSON string's contents: the literal before it opens the string, the one after closes it.
    if (!literal.endsWith('"') || template[match.index + match[0].length] !== '"') {
      throw new Error(`media template: field ${match[0]} must sit between quotes`)
    }
    literals.push(literal)
    kinds.push(match[1] as FieldKind)
    roles.push(match[2] as FieldRole)
    last = match.index + match[0].length
  }
  literals.push(template.slice(last))
  if (!roles.includes("payload")) throw new Error("media template: no payload field")
  const source = literals.map((literal, i) => escapeRegExp(literal) + (i < kinds.length ? FIELD_PATTERN[kinds[i]!] : "")).join("")
  return { pattern: new RegExp(`^${source}$`), literals, kinds, roles, limits: kinds.map((kind) => MAX_LENGTH[kind]) }
}

/**
 * A scanner for one or more templates of the same dialect's media frame. `scan(text)` is true
 * when `text` is exactly one of them; the offsets are then in `scanner.result`.
 *
 * Template syntax: the frame's text with each value written `<kind:role>`, between its quotes.
 */
export const makeMediaScanner = (...templates: ReadonlyArray<string>) => {
  const compiled = templates.map(compile)
  const result = new ScannedMedia()

  const matches = (text: string, template: CompiledTemplate): boolean => {
    if (!template.pattern.test(text)) return false
    // The text is the template: each field runs from the end of its literal to the next quote.
    const { literals, kinds, roles, limits } = template
    result.trackStart = result.trackEnd = result.streamStart = result.streamEnd = result.chunk = result.timestamp = -1
    let at = 0
    for (let field = 0; field < kinds.length; field++) {
      at += literals[field]!.length
      const end = text.indexOf('"', at)
      if (end - at > limits[field]!) return false
      switch (roles[field]) {
        case "payload":
          result.payloadStart = at
          result.payloadEnd = end
          break
        case "track":
          result.trackStart = at
          result.trackEnd = end
          break
        case "stream":
          result.streamStart = at
          result.streamEnd = end
          break
        case "timestamp": {
          let value = 0
          for (let i = at; i < end; i++) value = value * 10 + (text.charCodeAt(i) - 0x30)
          result.timestamp = value
          break
        }
      }
      if (kinds[field] === "chunk") {
        let value = 0
        for (let i = at; i < end; i++) value = value * 10 + (text.charCodeAt(i) - 0x30)
        result.chunk = value
      }
      at = end
    }
    return true
  }

  return {
    result,
    scan: (text: string): boolean => {
      for (let i = 0; i < compiled.length; i++) if (matches(text, compiled[i]!)) return true
      return false
    }
  } as const
}

export type MediaScanner = ReturnType<typeof makeMediaScanner>
