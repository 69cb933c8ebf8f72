import { Either, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { AgentMessage, CallgateMessage } from "../../../src/frames/AgentDialect.js"
import { makeFrameDecoder } from "../../../src/frames/FrameDecoding.js"
import { TelnyxInbound, TelnyxOutbound, telnyxOutboundEncoder, TELNYX_INBOUND_EVENTS } from "../../../src/frames/TelnyxFrames.js"
import {
  TWILIO_INBOUND_EVENTS,
  TwilioInbound,
  twilioInboundEncoder,
  TwilioOutbound,
  twilioOutboundEncoder
} from "../../../src/frames/TwilioFrames.js"

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
    const opus = telnyx({ event: "start", stream_id: "s", start: { media_format: { encoding: "OPUS", sample_rate: 8000, channels: 1 } } })
    expect(Either.isLeft(opus) && opus.left.code).toBe(1007)
    const stereo = telnyx({ event: "start", stream_id: "s", start: { media_format: { encoding: "L16", sample_rate: 16000, channels: 2 } } })
    expect(Either.isLeft(stereo) && stereo.left.code).toBe(1007)
    for (const encoding of ["PCMU", "audio/x-mulaw", "PCMA", "L16", "G722"]) {
      expect(Either.isRight(telnyx({ event: "start", stream_id: "s", start: { media_format: { encoding, sample_rate: 8000, channels: 1 } } }))).toBe(true)
    }
  })
})

describe("hot-path media and mark guards agree with the schemas", () => {
  const payloads: Array<unknown> = [payload, "", "AAAA", "AA==", "A=A=", "not base64!", '"}', "x".repeat(60_001).replace(/x/g, "A"), 42, null, undefined, ["AAAA"]]
  const numberLikes: Array<unknown> = [undefined, "1", "12345678901234567890", "123456789012345678901", 7, -1, 1.5, null, true, [], {}]
  const strings: Array<unknown> = [undefined, "inbound", "", 5, null, {}]
  const chunks: Array<unknown> = [undefined, "1", "0", "999999999", "1000000000", "01", "-1", "1.5", "abc", 3, 0, -1, 2.5, 1e9, null]
  const containers = (inner: Record<string, unknown>): Array<unknown> => [inner, null, [inner], "media", 5]

  /** Every combination of one varied field over a valid base frame, plus the varied containers. */
  const variants = (base: Record<string, any>, fields: Record<string, Array<unknown>>, mediaFields: Record<string, Array<unknown>>) => {
    const out: Array<unknown> = [base, null, [], "media", { ...base, event: "mark" }, { ...base, event: undefined }]
    for (const [field, values] of Object.entries(fields)) for (const value of values) out.push({ ...base, [field]: value })
    for (const [field, values] of Object.entries(mediaFields)) for (const value of values) out.push({ ...base, media: { ...base.media, [field]: value } })
    for (const media of containers(base.media)) out.push({ ...base, media })
    const { media: _media, ...withoutMedia } = base
    out.push(withoutMedia)
    return out
  }

  const agree = (name: string, schema: Schema.Schema<any, any>, guard: (raw: unknown) => boolean, cases: Array<unknown>) => {
    const is = Schema.is(schema)
    let accepted = 0
    for (const raw of cases) {
      expect(guard(raw), `${name}: ${JSON.stringify(raw)?.slice(0, 120)}`).toBe(is(raw))
      if (is(raw)) accepted++
    }
    // Both outcomes were exercised.
    expect(accepted).toBeGreaterThan(3)
    expect(accepted).toBeLessThan(cases.length)
  }

  it("Twilio inbound media", async () => {
    const { TwilioMedia, isTwilioMediaFrame } = await import("../../../src/frames/TwilioFrames.js")
    const base = { event: "media", sequenceNumber: "3", streamSid: "MZ1", media: { track: "inbound", chunk: "1", timestamp: "20", payload } }
    agree(
      "twilio",
      TwilioMedia,
      isTwilioMediaFrame,
      variants(base, { sequenceNumber: numberLikes, streamSid: strings }, { payload: payloads, track: strings, chunk: numberLikes, timestamp: numberLikes })
    )
  })

  it("Telnyx inbound media", async () => {
    const { TelnyxMedia, isTelnyxMediaFrame } = await import("../../../src/frames/TelnyxFrames.js")
    const base = { event: "media", sequence_number: "4", stream_id: "s-1", media: { track: "inbound", chunk: "2", timestamp: "40", payload } }
    agree(
      "telnyx",
      TelnyxMedia,
      isTelnyxMediaFrame,
      variants(base, { sequence_number: numberLikes, stream_id: strings }, { payload: payloads, track: strings, chunk: chunks, timestamp: numberLikes })
    )
  })

  /** A valid mark frame, each field varied, and the mark object varied and missing. */
  const markVariants = (base: Record<string, any>, fields: Record<string, Array<unknown>>) => {
    const names: Array<unknown> = ["reply-1", "", "é ✓ 𝄞", "x".repeat(256), "x".repeat(257), 5, null, undefined, {}]
    const out: Array<unknown> = [base, null, [], "mark", { ...base, event: "media" }, { ...base, event: undefined }]
    for (const [field, values] of Object.entries(fields)) for (const value of values) out.push({ ...base, [field]: value })
    for (const name of names) out.push({ ...base, mark: { name } })
    for (const mark of [null, [base.mark], "reply-1", 5, {}]) out.push({ ...base, mark })
    const { mark: _mark, ...withoutMark } = base
    out.push(withoutMark)
    return out
  }

  it("Twilio and Telnyx mark echoes, and the agent's marks", async () => {
    const { TwilioMark, isTwilioMarkFrame } = await import("../../../src/frames/TwilioFrames.js")
    const { TelnyxMark, isTelnyxMarkFrame } = await import("../../../src/frames/TelnyxFrames.js")
    const { AgentMark, isAgentMarkMessage } = await import("../../../src/frames/AgentDialect.js")
    const twilio = { event: "mark", sequenceNumber: "4", streamSid: "MZ1", mark: { name: "reply-1" } }
    agree("twilio mark", TwilioMark, isTwilioMarkFrame, markVariants(twilio, { sequenceNumber: numberLikes, streamSid: strings }))
    const telnyx = { event: "mark", sequence_number: "4", stream_id: "s-1", mark: { name: "reply-1" } }
    agree("telnyx mark", TelnyxMark, isTelnyxMarkFrame, markVariants(telnyx, { sequence_number: numberLikes, stream_id: strings }))
    const agent = { event: "mark", streamSid: "MZ1", mark: { name: "reply-1" } }
    agree("agent mark", AgentMark, isAgentMarkMessage, markVariants(agent, { streamSid: strings }))
  })

  it("agent media", async () => {
    const { AgentMedia, isAgentMediaFrame } = await import("../../../src/frames/AgentDialect.js")
    const base = { event: "media", streamSid: "MZ1", media: { payload } }
    agree("agent", AgentMedia, isAgentMediaFrame, variants(base, { streamSid: strings }, { payload: payloads }))
  })
})
