import { Either, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { AgentMessage, CallgateMessage } from "../../../src/agent/AgentDialect.js"
import { makeFrameDecoder } from "../../../src/session/FrameDecoding.js"
import { TelnyxInbound, TelnyxOutbound, telnyxOutboundEncoder, TELNYX_INBOUND_EVENTS } from "../../../src/telephony/streams/TelnyxFrames.js"
import {
  TWILIO_INBOUND_EVENTS,
  TwilioInbound,
  twilioInboundEncoder,
  TwilioOutbound,
  twilioOutboundEncoder
} from "../../../src/telephony/streams/TwilioFrames.js"

const payload = Buffer.alloc(160, 0x7f).toString("base64")
const decodes = (schema: Schema.Schema<any, any>, text: string) => Either.isRight(Schema.decodeUnknownEither(schema)(JSON.parse(text)))

describe("dialect frames", () => {
  it("what callgate sends Twilio and Telnyx decodes under their outbound schemas", () => {
    const twilio = twilioOutboundEncoder("MZ123")
    for (const text of [twilio.media(payload), twilio.mark('a "quoted" name'), twilio.clear()]) {
      expect(decodes(TwilioOutbound, text), text).toBe(true)
    }
    expect(JSON.parse(twilio.mark('a "quoted" name')).mark.name).toBe('a "quoted" name')
    for (const text of [telnyxOutboundEncoder.media(payload), telnyxOutboundEncoder.mark("m"), telnyxOutboundEncoder.clear()]) {
      expect(decodes(TelnyxOutbound, text), text).toBe(true)
    }
  })

  it("what callgate sends an agent is Twilio's own inbound frames", () => {
    const agent = twilioInboundEncoder("MZabc")
    const frames = [
      agent.connected(),
      agent.start(1, { accountSid: "agent", callSid: "ses_1", customParameters: { sessionId: "ses_1" } }),
      agent.media(2, 1, 20, payload),
      agent.dtmf(3, "#"),
      agent.mark(4, "done"),
      agent.stop(5, { accountSid: "agent", callSid: "ses_1" })
    ]
    for (const text of frames) {
      expect(decodes(CallgateMessage, text), text).toBe(true)
      expect(decodes(TwilioInbound, text), text).toBe(true)
    }
    expect(JSON.parse(frames[2]!)).toEqual({
      event: "media",
      sequenceNumber: "2",
      media: { track: "inbound", chunk: "1", timestamp: "20", payload },
      streamSid: "MZabc"
    })
  })

  it("the agent dialect accepts Twilio's outbound frames and the three extensions", () => {
    for (const message of [
      { event: "media", streamSid: "MZ1", media: { payload } },
      { event: "mark", mark: { name: "x" } },
      { event: "clear" },
      { event: "hangup" },
      { event: "transfer", transfer: { to: "+14155550123" } },
      { event: "error", error: { message: "boom" } }
    ]) {
      expect(Either.isRight(Schema.decodeUnknownEither(AgentMessage)(message)), message.event).toBe(true)
    }
  })

  it("the decoders tell not-JSON, no event, unknown event and a malformed known event apart", () => {
    const twilio = makeFrameDecoder("twilio", TwilioInbound, TWILIO_INBOUND_EVENTS)
    expect(twilio(undefined)).toEqual(Either.left({ code: 1007, reason: "twilio: frame is not valid JSON" }))
    expect(twilio({ nope: 1 })).toEqual(Either.left({ code: 1007, reason: 'twilio: frame has no "event" string' }))
    expect(twilio({ event: "party" })).toEqual(Either.left({ code: 1003, reason: 'twilio: unknown event "party"' }))
    const bad = twilio({ event: "media", media: { payload: "!!" } })
    expect(Either.isLeft(bad) && bad.left).toEqual({ code: 1007, reason: "twilio: malformed media frame: media.payload media payload must be base64" })
    const telnyx = makeFrameDecoder("telnyx", TelnyxInbound, TELNYX_INBOUND_EVENTS)
    const noStream = telnyx({ event: "media", media: { chunk: "1", payload } })
    expect(Either.isLeft(noStream) && noStream.left.reason).toBe("telnyx: malformed media frame: stream_id is required")
    const pcma = telnyx({ event: "start", stream_id: "s", start: { media_format: { encoding: "PCMA", sample_rate: 8000, channels: 1 } } })
    expect(Either.isLeft(pcma) && pcma.left.code).toBe(1007)
    for (const encoding of ["PCMU", "audio/x-mulaw"]) {
      expect(Either.isRight(telnyx({ event: "start", stream_id: "s", start: { media_format: { encoding, sample_rate: 8000, channels: 1 } } }))).toBe(true)
    }
  })
})
