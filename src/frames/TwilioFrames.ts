import { Schema } from "effect"
import { Base64Payload, DtmfDigit, isAscii, isBase64Payload, isMarkName, isNumberLike, isRecord, MarkName, NumberLike } from "./MediaFields.js"
import { makeMediaScanner } from "./MediaScanner.js"

/**
 * Twilio Media Streams, bidirectional (`<Connect><Stream>`): the frames Twilio sends and the ones
 * it accepts. The agent dialect is this same protocol (src/frames/AgentDialect.ts builds on it).
 * Unknown extra fields are ignored; missing or mistyped ones are errors.
 */
const sequenced = {
  sequenceNumber: Schema.optional(NumberLike),
  streamSid: Schema.optional(Schema.String)
}

export const TwilioConnected = Schema.Struct({
  event: Schema.Literal("connected"),
  protocol: Schema.optional(Schema.String),
  version: Schema.optional(Schema.String)
})

export const TwilioMediaFormat = Schema.Struct({
  encoding: Schema.Literal("audio/x-mulaw"),
  sampleRate: Schema.Literal(8000),
  channels: Schema.Literal(1)
})

export const TwilioStart = Schema.Struct({
  event: Schema.Literal("start"),
  ...sequenced,
  start: Schema.Struct({
    accountSid: Schema.String,
    streamSid: Schema.String,
    callSid: Schema.String,
    tracks: Schema.optional(Schema.Array(Schema.String)),
    mediaFormat: TwilioMediaFormat,
    customParameters: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String }))
  })
})

export const TwilioMedia = Schema.Struct({
  event: Schema.Literal("media"),
  ...sequenced,
  media: Schema.Struct({
    track: Schema.optional(Schema.String),
    chunk: Schema.optional(NumberLike),
    timestamp: Schema.optional(NumberLike),
    payload: Base64Payload
  })
})

export const TwilioDtmf = Schema.Struct({
  event: Schema.Literal("dtmf"),
  ...sequenced,
  dtmf: Schema.Struct({ track: Schema.optional(Schema.String), digit: DtmfDigit })
})

export const TwilioMark = Schema.Struct({
  event: Schema.Literal("mark"),
  ...sequenced,
  mark: Schema.Struct({ name: MarkName })
})

export const TwilioStop = Schema.Struct({
  event: Schema.Literal("stop"),
  ...sequenced,
  stop: Schema.optional(Schema.Struct({ accountSid: Schema.optional(Schema.String), callSid: Schema.optional(Schema.String) }))
})

/** The `sequenced` fields as the hand-written guards check them. */
const isSequenced = (raw: Record<string, unknown>): boolean =>
  (raw.sequenceNumber === undefined || isNumberLike(raw.sequenceNumber)) && (raw.streamSid === undefined || typeof raw.streamSid === "string")

/** `Schema.is(TwilioMedia)`, hand-written for the hot path (held to the schema by the frame tests). */
export const isTwilioMediaFrame = (raw: unknown): raw is typeof TwilioMedia.Type => {
  if (!isRecord(raw) || raw.event !== "media") return false
  const media = raw.media
  return (
    isRecord(media) &&
    isBase64Payload(media.payload) &&
    (media.track === undefined || typeof media.track === "string") &&
    (media.chunk === undefined || isNumberLike(media.chunk)) &&
    (media.timestamp === undefined || isNumberLike(media.timestamp)) &&
    isSequenced(raw)
  )
}

/** `Schema.is(TwilioMark)`, hand-written: the echo of every mark takes it instead of the full decode. */
export const isTwilioMarkFrame = (raw: unknown): raw is typeof TwilioMark.Type =>
  isRecord(raw) && raw.event === "mark" && isRecord(raw.mark) && isMarkName(raw.mark.name) && isSequenced(raw)

/**
 * The media fast path (MediaScanner.ts): a media frame exactly as Twilio writes it (and as
 * twilioInboundEncoder writes it to agents). Anything else takes the full parse.
 */
export const twilioMediaScanner = makeMediaScanner(
  `{"event":"media","sequenceNumber":"<digits:skip>","media":{"track":"<text:track>","chunk":"<digits:skip>","timestamp":"<digits:timestamp>","payload":"<payload:payload>"},"streamSid":"<text:stream>"}`
)

/** Every frame Twilio sends to a stream server. */
export const TwilioInbound = Schema.Union(TwilioConnected, TwilioStart, TwilioMedia, TwilioDtmf, TwilioMark, TwilioStop)
export type TwilioInbound = typeof TwilioInbound.Type
export const TWILIO_INBOUND_EVENTS: ReadonlySet<string> = new Set(["connected", "start", "media", "dtmf", "mark", "stop"])

/** What a stream server may send to Twilio. */
export const TwilioOutboundMedia = Schema.Struct({
  event: Schema.Literal("media"),
  streamSid: Schema.optional(Schema.String),
  media: Schema.Struct({ payload: Base64Payload })
})
export const TwilioOutboundMark = Schema.Struct({
  event: Schema.Literal("mark"),
  streamSid: Schema.optional(Schema.String),
  mark: Schema.Struct({ name: MarkName })
})
/** `Schema.is(TwilioOutboundMark)`, hand-written (an agent's marks, AgentDialect.ts). */
export const isTwilioOutboundMarkFrame = (raw: unknown): raw is typeof TwilioOutboundMark.Type =>
  isRecord(raw) && raw.event === "mark" && isRecord(raw.mark) && isMarkName(raw.mark.name) && (raw.streamSid === undefined || typeof raw.streamSid === "string")
export const TwilioClear = Schema.Struct({ event: Schema.Literal("clear"), streamSid: Schema.optional(Schema.String) })
export const TwilioOutbound = Schema.Union(TwilioOutboundMedia, TwilioOutboundMark, TwilioClear)

/** `Schema.is(TwilioOutboundMedia)`, hand-written for the hot path (the agent's audio). */
export const isTwilioOutboundMediaFrame = (raw: unknown): raw is typeof TwilioOutboundMedia.Type =>
  isRecord(raw) &&
  raw.event === "media" &&
  isRecord(raw.media) &&
  isBase64Payload(raw.media.payload) &&
  (raw.streamSid === undefined || typeof raw.streamSid === "string")

/**
 * The media fast path for what is sent to Twilio (the agent dialect's media): exactly as
 * twilioOutboundEncoder writes it, with or without the streamSid.
 */
export const twilioOutboundMediaScanner = makeMediaScanner(
  `{"event":"media","streamSid":"<text:stream>","media":{"payload":"<payload:payload>"}}`,
  `{"event":"media","media":{"payload":"<payload:payload>"}}`
)

/**
 * Frames built as strings around values that are already safe to paste: the payload passed the
 * base64 pattern, the sid is quoted once with JSON.stringify, names go through JSON.stringify.
 */
export const twilioOutboundEncoder = (streamSid: string) => {
  const sid = JSON.stringify(streamSid)
  const mediaHead = `{"event":"media","streamSid":${sid},"media":{"payload":"`
  return {
    media: (payload: string) => mediaHead + payload + `"}}`,
    /** `media` frames hold only ASCII (a base64 payload between ASCII parts): WireSocket.sendAscii may carry them. */
    mediaIsAscii: isAscii(mediaHead),
    mark: (name: string) => `{"event":"mark","streamSid":${sid},"mark":{"name":${JSON.stringify(name)}}}`,
    clear: () => `{"event":"clear","streamSid":${sid}}`
  } as const
}

export interface TwilioStartFields {
  readonly accountSid: string
  readonly callSid: string
  readonly customParameters: Readonly<Record<string, string>>
  /** The audio format of the call's media (default 8 kHz mu-law, Twilio's only one). */
  readonly mediaFormat?: { readonly encoding: string; readonly sampleRate: number; readonly channels: number } | undefined
}

/** The frames Twilio sends, as a stream server (or an agent) receives them. */
export const twilioInboundEncoder = (streamSid: string) => {
  const sid = JSON.stringify(streamSid)
  const tail = `,"streamSid":${sid}}`
  const mediaTail = `"}` + tail
  return {
    /** `media` frames hold only ASCII (numbers and a base64 payload between ASCII parts): WireSocket.sendAscii may carry them. */
    mediaIsAscii: isAscii(mediaTail),
    connected: () => `{"event":"connected","protocol":"Call","version":"1.0.0"}`,
    start: (sequenceNumber: number, fields: TwilioStartFields) =>
      JSON.stringify({
        event: "start",
        sequenceNumber: String(sequenceNumber),
        start: {
          accountSid: fields.accountSid,
          streamSid,
          callSid: fields.callSid,
          tracks: ["inbound"],
          mediaFormat: fields.mediaFormat ?? { encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 },
          customParameters: fields.customParameters
        },
        streamSid
      }),
    media: (sequenceNumber: number, chunk: number, timestampMs: number, payload: string) =>
      `{"event":"media","sequenceNumber":"` +
      sequenceNumber +
      `","media":{"track":"inbound","chunk":"` +
      chunk +
      `","timestamp":"` +
      timestampMs +
      `","payload":"` +
      payload +
      mediaTail,
    dtmf: (sequenceNumber: number, digit: string) =>
      `{"event":"dtmf","sequenceNumber":"${sequenceNumber}","dtmf":{"track":"inbound_track","digit":"${digit}"}${tail}`,
    mark: (sequenceNumber: number, name: string) =>
      `{"event":"mark","sequenceNumber":"${sequenceNumber}","mark":{"name":${JSON.stringify(name)}}${tail}`,
    stop: (sequenceNumber: number, fields: { readonly accountSid: string; readonly callSid: string }) =>
      `{"event":"stop","sequenceNumber":"${sequenceNumber}","stop":{"accountSid":${JSON.stringify(fields.accountSid)},"callSid":${JSON.stringify(fields.callSid)}}${tail}`
  } as const
}
