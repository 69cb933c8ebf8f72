import fc from "fast-check"
import { Either, Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { CallerEvents, StreamOpening } from "../../src/kernel/CallLegs.js"
import type { StreamHost } from "../../src/telephony/streams/StreamHost.js"
import { TelnyxStream } from "../../src/telephony/streams/TelnyxStream.js"
import { TwilioStream } from "../../src/telephony/streams/TwilioStream.js"
import { audioFrames, dialInAgent, type Gateway, openSocket, startGateway, twilioCall, until } from "../livecall/callHarness.js"
import { uniqueId } from "../support/testApp.js"
import { caseCounter, DOCUMENTED_CLOSE_CODES, framesFrom, recordingSocket, RUNS } from "./fuzzSupport.js"

const PAYLOAD = "f/8A/w=="
const CALL_SID = "CA0123456789abcdef0123456789abcdef"

const twilioFrames = [
  { event: "connected", protocol: "Call", version: "1.0.0" },
  {
    event: "start",
    sequenceNumber: "1",
    streamSid: "MZ1",
    start: {
      accountSid: "AC1",
      streamSid: "MZ1",
      callSid: CALL_SID,
      tracks: ["inbound"],
      mediaFormat: { encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 },
      customParameters: { token: "good" }
    }
  },
  { event: "media", sequenceNumber: "2", streamSid: "MZ1", media: { track: "inbound", chunk: "1", timestamp: "20", payload: PAYLOAD } },
  { event: "dtmf", sequenceNumber: "3", streamSid: "MZ1", dtmf: { track: "inbound_track", digit: "5" } },
  { event: "mark", sequenceNumber: "4", streamSid: "MZ1", mark: { name: "m1" } },
  { event: "stop", sequenceNumber: "5", streamSid: "MZ1", stop: { accountSid: "AC1", callSid: CALL_SID } }
]

const telnyxFrames = [
  { event: "connected", version: "1.0.0" },
  {
    event: "start",
    sequence_number: "1",
    stream_id: "st1",
    start: {
      user_id: "u",
      call_control_id: "v3:call",
      call_session_id: "cs",
      from: "+13122010094",
      to: "+13122123456",
      tags: [],
      client_state: null,
      custom_parameters: {},
      media_format: { encoding: "PCMU", sample_rate: 8000, channels: 1 }
    }
  },
  { event: "media", sequence_number: "2", stream_id: "st1", media: { track: "inbound", chunk: "1", timestamp: "20", payload: PAYLOAD } },
  { event: "dtmf", sequence_number: "3", stream_id: "st1", occurred_at: "2026-01-01T00:00:00Z", dtmf: { digit: "#" } },
  { event: "mark", sequence_number: "4", stream_id: "st1", mark: { name: "m1" } },
  { event: "error", sequence_number: "5", stream_id: "st1", payload: { code: 100002, title: "t", detail: "d" } },
  { event: "stop", sequence_number: "6", stream_id: "st1", stop: { user_id: "u", call_control_id: "v3:call" } }
]

/** A host whose token "good" is valid for the call; `open` binds the stream to recording events. */
const hostFor = (kind: "twilio" | "telnyx-call-control") => {
  const events: Array<string> = []
  const recorder: CallerEvents = {
    callerMedia: () => void events.push("media"),
    callerDtmf: () => void events.push("dtmf"),
    carrierMark: () => void events.push("mark"),
    carrierStopped: () => void events.push("stopped"),
    carrierGone: (fault) => void events.push(fault === undefined ? "gone" : `gone:${fault.kind}`)
  }
  const host: StreamHost = {
    verifyToken: (token) =>
      token === "good" ? Option.some({ agentId: "a", environmentId: "e", kind, callId: kind === "twilio" ? CALL_SID : "v3:call", exp: 0 } as any) : Option.none(),
    // Every token is used here for the first time (single-use tokens are checked by their own tests).
    spend: (_claims, _provider, done) => done(true),
    open: (opening: StreamOpening) => {
      opening.carrier.bind(recorder)
      return Either.void
    }
  }
  return { host, events }
}

const check = (ok: boolean, what: string) => {
  if (!ok) throw new Error(what)
}

/**
 * Each case: a fresh stream, optionally past a valid `start`, then one to three generated frames.
 * Runs in batches that yield to the event loop, so the gateway on the same process keeps serving.
 */
const fuzzDialect = async (
  name: "twilio" | "telnyx",
  make: (socket: ReturnType<typeof recordingSocket>["socket"], host: StreamHost) => { onText(text: string): void },
  valid: ReadonlyArray<Record<string, unknown>>
) => {
  const counter = caseCounter(`${name} frames`)
  const closes = new Map<number, number>()
  const property = fc.property(fc.boolean(), fc.array(framesFrom(valid), { minLength: 1, maxLength: 3 }), (started, frames) => {
      counter.count()
      const recording = recordingSocket()
      const { host, events } = hostFor(name === "twilio" ? "twilio" : "telnyx-call-control")
      const stream = make(recording.socket, host)
      if (started) {
        stream.onText(JSON.stringify(valid[0]))
        stream.onText(JSON.stringify(valid[1]))
      }
      // A throw from onText fails the property: none may escape.
      for (const frame of frames) stream.onText(frame)
      const closed = recording.closed()
      if (closed !== undefined) {
        closes.set(closed.code, (closes.get(closed.code) ?? 0) + 1)
        check(DOCUMENTED_CLOSE_CODES.has(closed.code), `undocumented close code ${closed.code}`)
        check(Buffer.byteLength(closed.reason) <= 123, `close reason over 123 bytes: ${closed.reason}`)
        if (closed.code !== 1000) check(closed.reason.startsWith(`${name}: `), `reason without its dialect: ${closed.reason}`)
        // A live session hears a failure as a hard error of the carrier side, never anything else.
        for (const event of events) {
          if (event.startsWith("gone:")) check(event === "gone:carrier_protocol_error" || event === "gone:carrier_stream_error", event)
        }
      }
    })
  const BATCH = 500
  for (let done = 0; done < RUNS; done += BATCH) {
    fc.assert(property, { numRuns: Math.min(BATCH, RUNS - done), seed: 1000 + done })
    await new Promise((resolve) => setImmediate(resolve))
  }
  const cases = counter.report()
  console.log(`  ${name} close codes: ${JSON.stringify(Object.fromEntries(closes))}`)
  return cases
}

describe("fuzz: carrier stream frames, with a bystander call on the same process", () => {
  let gateway: Gateway
  beforeAll(async () => {
    gateway = await startGateway()
  })
  afterAll(() => gateway.close())

  it(`Twilio and Telnyx frames: ${RUNS} cases each, no throw escapes, only documented refusals; the bystander keeps every frame`, async () => {
    // The bystander: a real call through the gateway, paced like a carrier, for the whole run.
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "the agent in the pool")
    const sid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const bystander = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: sid }), callSid: sid })
    bystander.start()
    const frames = audioFrames("caller-appointment-noisy.ulaw", 150)
    let sending = true
    const paced = (async () => {
      for (const frame of frames) {
        bystander.media(frame)
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      sending = false
    })()

    // Generated frames over real sockets to the same gateway, while the bystander talks.
    const generated = fc.sample(framesFrom(twilioFrames), { numRuns: 1000, seed: 42 })
    let overSockets = 0
    const signature = { "X-Twilio-Signature": gateway.twilio.sign(gateway.signedStreamUrl("twilio")) }
    while (overSockets < generated.length) {
      const peer = await openSocket(`${gateway.wsBase}/telephony/twilio/stream`, signature)
      while (overSockets < generated.length && peer.ws.readyState === peer.ws.OPEN) {
        peer.send(generated[overSockets++]!)
        if (overSockets % 25 === 0) await new Promise((resolve) => setTimeout(resolve, 1))
      }
      peer.close()
    }

    // The in-process suites run on the same event loop as the gateway.
    const twilioCases = await fuzzDialect("twilio", (socket, host) => new TwilioStream(socket, host), twilioFrames)
    const telnyxCases = await fuzzDialect("telnyx", (socket, host) => new TelnyxStream(socket, host, { agentId: "a", environmentId: "e", kind: "telnyx-call-control", callId: "v3:call", exp: 0 } as any), telnyxFrames)
    expect(twilioCases).toBeGreaterThanOrEqual(10_000)
    expect(telnyxCases).toBeGreaterThanOrEqual(10_000)

    await paced
    expect(sending).toBe(false)
    await agent.waitForEvent("media", frames.length, 15_000)
    expect(agent.events("media").map((m) => m.media.payload)).toEqual(frames)
    expect(agent.closed).toBeUndefined()
    console.log(`fuzz: ${overSockets} generated Twilio frames also sent over real sockets; the bystander call kept ${frames.length}/${frames.length} frames in order`)
    bystander.stop()
  }, 120_000)
})
