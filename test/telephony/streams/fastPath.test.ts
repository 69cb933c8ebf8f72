import { Either, Option } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import type { CallerEvents, LegFault, StreamOpening } from "../../../src/kernel/CallLegs.js"
import type { WireListener, WireSocket } from "../../../src/frames/WireSocket.js"
import type { SessionClaims } from "../../../src/telephony/SessionTokens.js"
import type { CarrierStreamDialect, CarrierStreamLeg } from "../../../src/telephony/streams/CarrierStreamLeg.js"
import type { StreamHost } from "../../../src/telephony/streams/StreamHost.js"
import { TelnyxStream, telnyxStreamDialect } from "../../../src/telephony/streams/TelnyxStream.js"
import { TwilioStream, twilioStreamDialect } from "../../../src/telephony/streams/TwilioStream.js"
import { isAscii } from "../../../src/frames/MediaFields.js"
import { ScannedMedia } from "../../../src/frames/MediaScanner.js"
import { dialects, frames, TELNYX_STREAM_ID, TWILIO_STREAM_SID, wellFormed } from "../../frames/mediaFrameArbitraries.js"

/**
 * A carrier stream with the media fast path and the same stream reading every frame through the
 * full parse (its dialect's scanner recognising nothing) are fed the same generated frames after
 * the same `start`: what each sends, closes and tells the session must be identical, frame for
 * frame. The fast path may only ever be a quicker way to the same outcome.
 */

const RUNS = 2_000

/** Everything a leg did, in order. */
type Log = Array<ReadonlyArray<unknown>>

const recordingSocket = (log: Log): WireSocket => ({
  send: (text) => log.push(["send", text]),
  // The same entry as `send`: both paths must send the same frames, whichever way they go out.
  sendAscii: (text) => {
    if (!isAscii(text)) throw new Error("sendAscii given a text that is not ASCII")
    log.push(["send", text])
  },
  close: (code, reason) => log.push(["close", code, reason]),
  listen: (_listener: WireListener) => {},
  isOpen: true,
  bufferedAmount: 0,
  heartbeat: () => true
})

const recordingEvents = (log: Log): CallerEvents => ({
  callerMedia: (payload) => log.push(["callerMedia", payload]),
  callerDtmf: (digit) => log.push(["callerDtmf", digit]),
  carrierMark: (name) => log.push(["carrierMark", name]),
  carrierStopped: () => log.push(["carrierStopped"]),
  carrierGone: (fault: LegFault | undefined) => log.push(["carrierGone", fault])
})

const host = (log: Log, claims: SessionClaims): StreamHost => ({
  verifyToken: (token) => (token === "good" ? Option.some(claims) : Option.none()),
  // Every token is a first presentation here: the stream opens at once.
  spend: (_claims, _provider, done) => done(true),
  open: (opening: StreamOpening) => {
    log.push(["open", opening.streamSid, opening.callId])
    opening.carrier.bind(recordingEvents(log))
    return Either.right(undefined)
  }
})

const fullParseOnly = <S>(dialect: CarrierStreamDialect<S>): CarrierStreamDialect<S> => ({
  ...dialect,
  scanner: { result: new ScannedMedia(), scan: () => false },
  markName: () => undefined
})

const exp = Math.floor(Date.now() / 1000) + 3600

const twilioStart = JSON.stringify({
  event: "start",
  sequenceNumber: "1",
  start: {
    accountSid: "AC1",
    streamSid: TWILIO_STREAM_SID,
    callSid: "CA1",
    tracks: ["inbound"],
    mediaFormat: { encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 },
    customParameters: { token: "good" }
  },
  streamSid: TWILIO_STREAM_SID
})

const telnyxStart = JSON.stringify({
  event: "start",
  sequence_number: "1",
  stream_id: TELNYX_STREAM_ID,
  start: { call_control_id: "v3:cc", from: "+1", to: "+2", media_format: { encoding: "PCMU", sample_rate: 8000, channels: 1 } }
})

const legs = {
  twilio: {
    start: twilioStart,
    claims: { agentId: "a", environmentId: "e", kind: "twilio", callId: "CA1", exp } as SessionClaims,
    make: (socket: WireSocket, host: StreamHost, fast: boolean): CarrierStreamLeg<any> =>
      new TwilioStream(socket, host, fast ? twilioStreamDialect : fullParseOnly(twilioStreamDialect))
  },
  telnyx: {
    start: telnyxStart,
    claims: { agentId: "a", environmentId: "e", kind: "telnyx-call-control", callId: "v3:cc", exp } as SessionClaims,
    make: (socket: WireSocket, host: StreamHost, fast: boolean, claims?: SessionClaims): CarrierStreamLeg<any> =>
      new TelnyxStream(socket, host, claims!, fast ? telnyxStreamDialect : fullParseOnly(telnyxStreamDialect))
  }
} as const

const run = (name: "twilio" | "telnyx", fast: boolean, texts: ReadonlyArray<string>): Log => {
  const log: Log = []
  const leg = legs[name]
  const stream = leg.make(recordingSocket(log), host(log, leg.claims), fast, leg.claims)
  stream.onText(leg.start)
  for (const text of texts) stream.onText(text)
  return log
}

describe("carrier streams: the media fast path and the full parse act alike", () => {
  for (const name of ["twilio", "telnyx"] as const) {
    it(`${name}: the same sends, closes and session events for ${RUNS} generated frame sequences`, () => {
      const dialect = dialects.find((d) => d.name === name)!
      let media = 0
      let closed = 0
      // A few well-formed frames in chunk order, then generated ones, and sometimes the carrier's stop.
      const inOrder = fc
        .array(wellFormed, { maxLength: 4 })
        .map((all) => all.map((fields, i) => dialect.canonical({ ...fields, chunk: String(i + 1), stream: name === "twilio" ? TWILIO_STREAM_SID : TELNYX_STREAM_ID })))
      const stop = name === "twilio" ? `{"event":"stop","sequenceNumber":"9","streamSid":"${TWILIO_STREAM_SID}"}` : `{"event":"stop","stream_id":"${TELNYX_STREAM_ID}"}`
      const sequences = fc
        .tuple(inOrder, fc.array(frames(dialect), { minLength: 1, maxLength: 5 }), fc.boolean())
        .map(([first, rest, stops]) => [...first, ...rest, ...(stops ? [stop] : [])])
      fc.assert(
        fc.property(sequences, (texts) => {
          const fast = run(name, true, texts)
          expect(fast).toEqual(run(name, false, texts))
          if (fast.some((entry) => entry[0] === "callerMedia")) media++
          if (fast.some((entry) => entry[0] === "close")) closed++
        }),
        { numRuns: RUNS, seed: 1616, endOnFailure: true }
      )
      // Both outcomes were exercised: audio delivered, and streams closed for a bad frame.
      expect(media).toBeGreaterThan(RUNS / 4)
      expect(closed).toBeGreaterThan(RUNS / 10)
    })
  }
})
