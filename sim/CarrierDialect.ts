/**
 * The carrier side of a media stream, as text frames: what Twilio and Telnyx send to the
 * application (callgate). Written from the carriers' public documentation, independently of
 * callgate's own schemas, so the simulator checks callgate against the protocol rather than
 * against itself. Frames are built as strings: the media frame runs 50 times a second per call.
 *
 * Sequence numbers count every numbered frame from 1 (`start`); `connected` has none. Media chunks
 * count from 1; media timestamps are milliseconds of audio since the stream started.
 */
export interface CarrierDialect {
  readonly provider: "twilio" | "telnyx"
  /** streamSid (Twilio) or stream_id (Telnyx). */
  readonly streamId: string
  connected(): string
  start(seq: number): string
  media(seq: number, chunk: number, timestampMs: number, payloadBase64: string): string
  dtmf(seq: number, digit: string): string
  /** The echo of a mark the application sent, once its audio has played (or was cleared). */
  mark(seq: number, name: string): string
  stop(seq: number): string
  /** Telnyx only: a stream error frame. */
  error?(seq: number, code: number, title: string, detail: string): string
  /** Names the stream id field the application's frames may carry, to check it matches. */
  readonly streamIdField: "streamSid" | "stream_id"
}

const str = JSON.stringify

export interface TwilioStreamIdentity {
  readonly streamSid: string
  readonly accountSid: string
  readonly callSid: string
  readonly customParameters: Readonly<Record<string, string>>
}

/** Twilio Media Streams (bidirectional, `<Connect><Stream>`): camelCase, `streamSid` beside each frame. */
export const twilioDialect = (identity: TwilioStreamIdentity): CarrierDialect => {
  const sid = str(identity.streamSid)
  const tail = `,"streamSid":${sid}}`
  return {
    provider: "twilio",
    streamId: identity.streamSid,
    streamIdField: "streamSid",
    connected: () => `{"event":"connected","protocol":"Call","version":"1.0.0"}`,
    start: (seq) =>
      str({
        event: "start",
        sequenceNumber: String(seq),
        start: {
          accountSid: identity.accountSid,
          streamSid: identity.streamSid,
          callSid: identity.callSid,
          tracks: ["inbound"],
          mediaFormat: { encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 },
          customParameters: identity.customParameters
        },
        streamSid: identity.streamSid
      }),
    media: (seq, chunk, timestampMs, payload) =>
      `{"event":"media","sequenceNumber":"${seq}","media":{"track":"inbound","chunk":"${chunk}","timestamp":"${timestampMs}","payload":"${payload}"}${tail}`,
    dtmf: (seq, digit) => `{"event":"dtmf","sequenceNumber":"${seq}","dtmf":{"track":"inbound_track","digit":${str(digit)}}${tail}`,
    mark: (seq, name) => `{"event":"mark","sequenceNumber":"${seq}","mark":{"name":${str(name)}}${tail}`,
    stop: (seq) =>
      `{"event":"stop","sequenceNumber":"${seq}","stop":{"accountSid":${str(identity.accountSid)},"callSid":${str(identity.callSid)}}${tail}`
  }
}

export interface TelnyxStreamIdentity {
  readonly streamId: string
  readonly callControlId: string
  readonly callSessionId: string
  readonly userId: string
  readonly from: string
  readonly to: string
  readonly customParameters: Readonly<Record<string, string>>
  readonly clientState?: string | undefined
  /** Telnyx documents `PCMU`; `audio/x-mulaw` is accepted by callgate too. Default `PCMU`. */
  readonly encoding?: "PCMU" | "audio/x-mulaw"
  /** `start.media_format` of a stream in another codec (StreamCodec.ts); overrides `encoding`. */
  readonly mediaFormat?: { readonly encoding: string; readonly sample_rate: number } | undefined
  /** Echoed in the `connected` frame, as Telnyx does when a stream auth token is configured. */
  readonly streamAuthToken?: string | undefined
}

/** Telnyx media streaming: snake_case, `stream_id` at the top level of each frame. */
export const telnyxDialect = (identity: TelnyxStreamIdentity): CarrierDialect => {
  const id = str(identity.streamId)
  const tail = `,"stream_id":${id}}`
  return {
    provider: "telnyx",
    streamId: identity.streamId,
    streamIdField: "stream_id",
    connected: () =>
      str({
        event: "connected",
        version: "1.0.0",
        ...(identity.streamAuthToken !== undefined ? { connected: { "x-telnyx-streaming-auth-token": identity.streamAuthToken } } : {})
      }),
    start: (seq) =>
      str({
        event: "start",
        sequence_number: String(seq),
        stream_id: identity.streamId,
        start: {
          user_id: identity.userId,
          call_control_id: identity.callControlId,
          call_session_id: identity.callSessionId,
          from: identity.from,
          to: identity.to,
          tags: [],
          client_state: identity.clientState ?? null,
          custom_parameters: identity.customParameters,
          media_format: { ...(identity.mediaFormat ?? { encoding: identity.encoding ?? "PCMU", sample_rate: 8000 }), channels: 1 }
        }
      }),
    media: (seq, chunk, timestampMs, payload) =>
      `{"event":"media","sequence_number":"${seq}","media":{"track":"inbound","chunk":"${chunk}","timestamp":"${timestampMs}","payload":"${payload}"}${tail}`,
    dtmf: (seq, digit) =>
      `{"event":"dtmf","sequence_number":"${seq}","occurred_at":"${new Date().toISOString()}","dtmf":{"digit":${str(digit)}}${tail}`,
    mark: (seq, name) => `{"event":"mark","sequence_number":"${seq}","mark":{"name":${str(name)}}${tail}`,
    stop: (seq) =>
      `{"event":"stop","sequence_number":"${seq}","stop":{"user_id":${str(identity.userId)},"call_control_id":${str(identity.callControlId)}}${tail}`,
    error: (seq, code, title, detail) =>
      `{"event":"error","sequence_number":"${seq}","payload":{"code":${code},"title":${str(title)},"detail":${str(detail)}}${tail}`
  }
}
