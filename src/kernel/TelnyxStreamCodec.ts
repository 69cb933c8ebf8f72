import type { AudioFormat } from "./AudioFormat.js"

/**
 * The codec callgate asks Telnyx to stream a call in (environment field `telnyxStreamCodec`,
 * docs/calls.md, "Audio formats"), both ways: Telnyx's Call Control `answer` / `streaming_start`
 * take `stream_codec` (what Telnyx sends), `stream_bidirectional_codec` and
 * `stream_bidirectional_sampling_rate` (what callgate sends back, `stream_bidirectional_mode: rtp`);
 * TeXML's `<Stream>` takes the same as `codec`, `bidirectionalCodec` and `bidirectionalSamplingRate`.
 * Twilio streams are always 8 kHz mu-law: the setting does not apply to them.
 */
export const TELNYX_STREAM_CODECS = ["PCMU", "PCMA", "L16;rate=8000", "L16;rate=16000", "G722"] as const
export type TelnyxStreamCodec = (typeof TELNYX_STREAM_CODECS)[number]
export const DEFAULT_TELNYX_STREAM_CODEC: TelnyxStreamCodec = "PCMU"

/** Telnyx's own names for the codec and its sampling rate (G.722 carries 16 kHz audio). */
export const telnyxCodecRequest = (codec: TelnyxStreamCodec): { readonly codec: "PCMU" | "PCMA" | "L16" | "G722"; readonly samplingRate: 8000 | 16000 } => {
  switch (codec) {
    case "PCMU":
    case "PCMA":
      return { codec, samplingRate: 8000 }
    case "L16;rate=8000":
      return { codec: "L16", samplingRate: 8000 }
    case "L16;rate=16000":
      return { codec: "L16", samplingRate: 16000 }
    case "G722":
      return { codec: "G722", samplingRate: 16000 }
  }
}

/** The Call Control `answer` / `streaming_start` fields that ask for the codec both ways. */
export const callControlCodecFields = (codec: TelnyxStreamCodec) => {
  const request = telnyxCodecRequest(codec)
  return {
    stream_codec: request.codec,
    stream_bidirectional_codec: request.codec,
    stream_bidirectional_sampling_rate: request.samplingRate
  } as const
}

/** The TeXML `<Stream>` attributes that ask for the codec both ways. */
export const texmlCodecAttributes = (codec: TelnyxStreamCodec): Record<string, string> => {
  const request = telnyxCodecRequest(codec)
  return { codec: request.codec, bidirectionalCodec: request.codec, bidirectionalSamplingRate: String(request.samplingRate) }
}

/**
 * The codec to ask for again when a live call's stream is moved or re-opened (CallRelocation): the
 * format the call streams in now, so its agent keeps the audio it was given. 8 kHz mu-law when unknown.
 */
export const telnyxStreamCodecOf = (format: AudioFormat | undefined): TelnyxStreamCodec => {
  switch (format?.encoding) {
    case "audio/x-alaw":
      return "PCMA"
    case "audio/L16":
      return format.sampleRate === 16000 ? "L16;rate=16000" : "L16;rate=8000"
    case "audio/G722":
      return "G722"
    default:
      return "PCMU"
  }
}
