import twilio from "twilio"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { readUlawFile, silence, speechLike } from "../../sim/AudioSource.js"
import { nowUs, readStamp, STAMP_BYTES } from "../../sim/FrameStamp.js"
import { FRAME_BYTES, framesOf, isVoicedFrame } from "../../sim/Mulaw.js"
import { SimError, type SimCall } from "../../sim/SimCall.js"
import { runScript } from "../../sim/Script.js"
import { connectTwilioStream, placeTwilioCall } from "../../sim/TwilioCall.js"
import { defaultAnswer, type FakeGateway, startFakeGateway } from "./fakeGateway.js"

const appointment = readUlawFile("test/fixtures/audio/caller-appointment.ulaw")
const greeting = readUlawFile("test/fixtures/audio/agent-greeting.ulaw")

describe("simulated Twilio call", () => {
  let gateway: FakeGateway
  const calls: Array<SimCall> = []
  const place = async (options: Partial<Parameters<typeof placeTwilioCall>[0]> = {}) => {
    const call = await placeTwilioCall({ gatewayUrl: gateway.url, agentId: "agent_1", environmentId: "env_1", ...options })
    calls.push(call)
    return call
  }

  beforeEach(async () => {
    gateway = await startFakeGateway()
  })
  afterEach(async () => {
    await Promise.all(calls.splice(0).map((call) => call.hangup()))
    await gateway.close()
  })

  it("posts the voice webhook as Twilio does and follows the TwiML stream with its parameters", async () => {
    const call = await place({ from: "+15551230001", to: "+15551230002", callSid: "CA0123456789abcdef0123456789abcdef" })
    const hook = gateway.webhooks[0]!
    expect(hook.path).toBe("/telephony/twilio/voice")
    expect(hook.query.get("agentId")).toBe("agent_1")
    expect(hook.query.get("environmentId")).toBe("env_1")
    expect(hook.headers["content-type"]).toBe("application/x-www-form-urlencoded")
    expect(hook.form).toMatchObject({
      CallSid: "CA0123456789abcdef0123456789abcdef",
      From: "+15551230001",
      To: "+15551230002",
      Direction: "inbound",
      CallStatus: "ringing"
    })
    expect(hook.form.AccountSid).toMatch(/^AC[0-9a-f]{32}$/)

    const stream = await gateway.stream()
    expect(stream.request.url).toBe("/telephony/twilio/stream")
    const start = await stream.nth("start")
    expect(stream.messages[0]).toEqual({ event: "connected", protocol: "Call", version: "1.0.0" })
    expect(start).toEqual({
      event: "start",
      sequenceNumber: "1",
      start: {
        accountSid: hook.form.AccountSid,
        streamSid: call.streamId,
        callSid: "CA0123456789abcdef0123456789abcdef",
        tracks: ["inbound"],
        mediaFormat: { encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 },
        // XML entities in <Parameter> values are decoded, as Twilio does.
        customParameters: { token: "tok.en&1", agentId: "agent_1", from: "+15551230001" }
      },
      streamSid: call.streamId
    })
    expect(call.streamId).toMatch(/^MZ[0-9a-f]{32}$/)
    expect(call.entry?.stream.parameters.token).toBe("tok.en&1")
  })

  it("followRedirect: goes on to the <Redirect> when the gateway ends the stream, signed as Twilio signs it; not when the caller hangs up", async () => {
    await gateway.close()
    const redirectAnswer = `<?xml version="1.0" encoding="UTF-8"?><Response><Dial>+14155550123</Dial></Response>`
    gateway = await startFakeGateway({
      answer: (hook, origin) => {
        if (hook.path === "/telephony/twilio/after-stream") return { status: 200, body: redirectAnswer }
        const first = defaultAnswer(hook, origin)
        const redirect = `${origin}/telephony/twilio/after-stream?agentId=agent_1&amp;sessionId=ses_1`
        return { ...first, body: first.body.replace("</Response>", `<Redirect method="POST">${redirect}</Redirect></Response>`) }
      }
    })
    const authToken = "sim-redirect-token"
    const ended = await place({ authToken, followRedirect: true, callSid: "CA00000000000000000000000000000001" })
    const redirectUrl = `${gateway.url}/telephony/twilio/after-stream?agentId=agent_1&sessionId=ses_1`
    expect(ended.entry?.stream.redirect).toEqual({ url: redirectUrl, method: "POST" })
    // The gateway goes away mid-stream (its socket dies): the carrier follows the redirect.
    const stream = await gateway.stream(0)
    await stream.nth("media")
    stream.socket.terminate()
    const answer = await ended.redirected
    expect(answer).toMatchObject({ url: redirectUrl, status: 200, markup: redirectAnswer })
    const hook = gateway.webhooks.find((h) => h.path === "/telephony/twilio/after-stream")!
    expect(hook.form).toMatchObject({ CallSid: "CA00000000000000000000000000000001", CallStatus: "in-progress", Direction: "inbound" })
    expect(twilio.validateRequest(authToken, String(hook.headers["x-twilio-signature"]), redirectUrl, hook.form)).toBe(true)

    // A caller who hangs up is gone: nothing follows.
    const hungUp = await place({ authToken, followRedirect: true })
    await (await gateway.stream(1)).nth("media")
    await hungUp.hangup()
    expect(await hungUp.redirected).toBeUndefined()
    expect(gateway.webhooks.filter((h) => h.path === "/telephony/twilio/after-stream")).toHaveLength(1)
  })

  it("streams continuous media: numbered frames of 160 bytes, silence between the audio played", async () => {
    const call = await place()
    const stream = await gateway.stream()
    await call.play(appointment.subarray(0, 10 * FRAME_BYTES))
    await stream.until(() => stream.events("media").length >= 20)
    const media = stream.events("media")
    media.forEach((frame, i) => {
      expect(frame.sequenceNumber).toBe(String(i + 2))
      expect(frame.streamSid).toBe(call.streamId)
      expect(frame.media.track).toBe("inbound")
      expect(frame.media.chunk).toBe(String(i + 1))
      expect(frame.media.timestamp).toBe(String(i * 20))
      expect(Buffer.from(frame.media.payload, "base64")).toHaveLength(FRAME_BYTES)
    })
    // The played audio goes out byte for byte in ten consecutive frames; everything else is silence.
    const payloads = media.map((frame) => Buffer.from(frame.media.payload, "base64"))
    const first = payloads.findIndex((payload) => !payload.equals(Buffer.alloc(FRAME_BYTES, 0xff)))
    expect(Buffer.concat(payloads.slice(first, first + 10)).equals(appointment.subarray(0, 10 * FRAME_BYTES))).toBe(true)
    const rest = [...payloads.slice(0, first), ...payloads.slice(first + 10)]
    expect(rest.every((payload) => payload.equals(Buffer.alloc(FRAME_BYTES, 0xff)))).toBe(true)
  })

  it("sends audio in order, one frame per 20 ms, and nothing else when media is not continuous", async () => {
    const call = await place({ continuousMedia: false })
    const stream = await gateway.stream()
    const audio = appointment.subarray(0, 50 * FRAME_BYTES + 17) // a partial last frame is padded with silence
    const began = performance.now()
    const played = await call.play(audio)
    const elapsed = performance.now() - began
    expect(played).toEqual({ framesSent: 51, completed: true })
    await stream.until(() => stream.events("media").length === played.framesSent)
    const received = Buffer.concat(stream.events("media").map((frame) => Buffer.from(frame.media.payload, "base64")))
    expect(received.subarray(0, audio.length).equals(audio)).toBe(true)
    expect(received.subarray(audio.length).equals(Buffer.alloc(FRAME_BYTES - 17, 0xff))).toBe(true)
    // Paced, not dumped: the last of N frames cannot leave before (N - 1) * 20 ms.
    expect(elapsed).toBeGreaterThanOrEqual((played.framesSent - 1) * 20 - 1)
  })

  it("sends DTMF digits and ends with stop and a normal close", async () => {
    const call = await place()
    const stream = await gateway.stream()
    await call.sendDtmf("1#", 10)
    const closed = await call.hangup()
    expect(closed).toMatchObject({ code: 1000, by: "simulator" })
    await stream.until(() => stream.closed)
    const dtmf = stream.events("dtmf")
    expect(dtmf.map((frame) => frame.dtmf)).toEqual([
      { track: "inbound_track", digit: "1" },
      { track: "inbound_track", digit: "#" }
    ])
    expect(dtmf[0].streamSid).toBe(call.streamId)
    const stop = stream.messages.at(-1)
    expect(stop).toEqual({
      event: "stop",
      sequenceNumber: String(stream.messages.length - 1),
      stop: { accountSid: stream.events("start")[0].start.accountSid, callSid: stream.events("start")[0].start.callSid },
      streamSid: call.streamId
    })
    expect(stream.closed?.code).toBe(1000)
    // Sequence numbers count every numbered frame without a gap.
    expect(stream.messages.slice(1).map((m) => Number(m.sequenceNumber))).toEqual(stream.messages.slice(1).map((_, i) => i + 1))
  })

  it("echoes a mark once the audio before it has played, and at once when nothing is queued", async () => {
    const call = await place()
    const stream = await gateway.stream()
    await stream.nth("start")
    const echoed: Array<{ name: string; cleared: boolean }> = []
    call.on("markEchoed", ({ name, cleared }) => echoed.push({ name, cleared }))
    stream.sendMark("idle")
    const idleEcho = await stream.until(() => stream.events("mark").find((m) => m.mark.name === "idle"))
    expect(idleEcho).toMatchObject({ event: "mark", streamSid: call.streamId, mark: { name: "idle" } })

    const sentAt = performance.now()
    for (const frame of framesOf(greeting.subarray(0, 10 * FRAME_BYTES))) stream.sendMedia(frame)
    stream.sendMark("after-200ms")
    await stream.until(() => stream.events("mark").find((m) => m.mark.name === "after-200ms"))
    expect(performance.now() - sentAt).toBeGreaterThanOrEqual(190)
    expect(echoed).toEqual([
      { name: "idle", cleared: false },
      { name: "after-200ms", cleared: false }
    ])
    expect(call.stats.agentMessages).toBe(10)
  })

  it("clear drops queued audio and returns every outstanding mark at once, in order", async () => {
    const call = await place()
    const stream = await gateway.stream()
    await stream.nth("start")
    const clears: Array<number> = []
    const echoed: Array<{ name: string; cleared: boolean }> = []
    call.on("clear", ({ droppedMs }) => clears.push(droppedMs))
    call.on("markEchoed", ({ name, cleared }) => echoed.push({ name, cleared }))
    stream.sendMedia(greeting.subarray(0, 50 * FRAME_BYTES)) // one message of 1 s
    stream.sendMark("a")
    stream.sendMedia(greeting.subarray(50 * FRAME_BYTES, 100 * FRAME_BYTES))
    stream.sendMark("b")
    stream.sendClear()
    await stream.until(() => stream.events("mark").length === 2)
    expect(stream.events("mark").map((m) => m.mark.name)).toEqual(["a", "b"])
    expect(echoed).toEqual([
      { name: "a", cleared: true },
      { name: "b", cleared: true }
    ])
    expect(clears).toHaveLength(1)
    expect(clears[0]).toBeGreaterThan(1500)
    // Nothing is left playing: a new mark comes straight back.
    stream.sendMark("c")
    await stream.until(() => stream.events("mark").length === 3)
    expect(echoed[2]).toEqual({ name: "c", cleared: false })
  })

  it("reports the agent's answer latency from the caller's last voiced frame", async () => {
    // Stamped frames carry their send time (the shared monotonic clock), so the caller's last
    // voiced frame can be placed in time on both sides.
    const call = await place({ stampCallId: 7 })
    const stream = await gateway.stream()
    await stream.nth("start")
    const heardAt = new Map<unknown, number>()
    stream.socket.on("message", () => heardAt.set(stream.messages.at(-1), nowUs()))
    const caller = speechLike({ durationMs: 400, trailingSilenceMs: 100 })
    const callerFrames = framesOf(caller)
    const lastVoiced = callerFrames.findLastIndex((frame) => isVoicedFrame(frame))
    expect(lastVoiced).toBeGreaterThan(0)
    expect(lastVoiced).toBeLessThan(callerFrames.length - 1)
    // The stamp covers the first STAMP_BYTES of a frame; the rest is the caller's audio.
    const isLastVoiced = (message: any) =>
      Buffer.from(message.media.payload, "base64").subarray(STAMP_BYTES).equals(callerFrames[lastVoiced]!.subarray(STAMP_BYTES))
    const before = stream.events("media").length
    const turn = call.turn(caller, { answerTimeoutMs: 3000, quietMs: 100 })
    // The fake "agent" answers once the caller's speech is over (its last voiced frame and the silence after it have arrived).
    await stream.until(() => stream.events("media").length >= before + 26)
    const agentAnsweredAt = nowUs()
    const voiced = framesOf(greeting).filter((frame) => isVoicedFrame(frame)).slice(0, 5)
    for (const frame of voiced) stream.sendMedia(frame)
    const result = await turn
    expect(result.answer.answered).toBe(true)
    if (!result.answer.answered) return
    const heard = stream.events("media").slice(before).filter(isLastVoiced)
    expect(heard).toHaveLength(1)
    const lastVoicedSentAt = readStamp(Buffer.from(heard[0]!.media.payload, "base64"))!.sentUs
    const lastVoicedHeardAt = heardAt.get(heard[0])!
    expect(agentAnsweredAt).toBeGreaterThan(lastVoicedHeardAt)
    // At least the time the agent held back after hearing the caller's last voiced frame (the
    // caller sent it before the agent heard it; the simulator got the answer after it was sent),
    // at most the time from sending that frame to receiving the answer.
    expect(result.answer.latencyMs).toBeGreaterThanOrEqual((agentAnsweredAt - lastVoicedHeardAt) / 1000)
    expect(result.answer.latencyMs).toBeLessThanOrEqual((result.answer.atUs - lastVoicedSentAt) / 1000)
    expect(result.answer.atUs).toBeGreaterThanOrEqual(agentAnsweredAt)
    expect(result.agentMessages).toBe(5)
    expect(call.stats.agentVoicedMessages).toBe(5)
  })

  it("a turn nobody answers ends with answered false", async () => {
    const call = await place()
    const result = await call.turn(speechLike({ durationMs: 200 }), { answerTimeoutMs: 300 })
    expect(result.answer).toEqual({ answered: false, reason: "timeout" })
    // Silence from the agent is not an answer either.
    const stream = await gateway.stream()
    stream.sendMedia(silence(200))
    expect(await call.waitForAgentAnswer({ timeoutMs: 200 })).toEqual({ answered: false, reason: "timeout" })
  })

  it("runs a caller script step by step", async () => {
    const call = await place()
    const stream = await gateway.stream()
    await stream.nth("start")
    const steps: Array<string> = []
    const answering = stream.until(() => stream.events("dtmf").length === 2).then(() => {
      for (const frame of framesOf(greeting).filter((f) => isVoicedFrame(f)).slice(0, 3)) stream.sendMedia(frame)
    })
    const outcomes = await runScript(
      call,
      [{ play: "speech:200" }, { pause: 40 }, { dtmf: "42", gapMs: 10 }, { waitForAnswer: { timeoutMs: 3000 } }, { waitForQuiet: { quietMs: 50 } }, { hangup: true }, { pause: 10_000 }],
      (outcome) => steps.push(outcome.step)
    )
    await answering
    expect(steps).toEqual(["play", "pause", "dtmf", "waitForAnswer", "waitForQuiet", "hangup"])
    expect(outcomes[0]).toEqual({ step: "play", result: { framesSent: 10, completed: true } })
    expect(outcomes[3]).toMatchObject({ step: "waitForAnswer", result: { answered: true } })
    expect(outcomes[5]).toMatchObject({ step: "hangup", result: { code: 1000, by: "simulator" } })
    expect(stream.events("dtmf").map((m) => m.dtmf.digit)).toEqual(["4", "2"])
  })

  it("stamps outgoing frames with call id, chunk number and send time", async () => {
    const call = await place({ stampCallId: 77, continuousMedia: false })
    const stream = await gateway.stream()
    await call.play(appointment.subarray(0, 5 * FRAME_BYTES))
    await stream.until(() => stream.events("media").length === 5)
    const stamps = stream.events("media").map((frame) => readStamp(Buffer.from(frame.media.payload, "base64")))
    expect(stamps.map((stamp) => [stamp?.callId, stamp?.seq])).toEqual([1, 2, 3, 4, 5].map((seq) => [77, seq]))
    expect(stamps.every((stamp, i) => i === 0 || stamp!.sentUs > stamps[i - 1]!.sentUs)).toBe(true)
    // Only the stamp's bytes change: the rest of the frame is the audio.
    const first = Buffer.from(stream.events("media")[0].media.payload, "base64")
    expect(first.subarray(32).equals(appointment.subarray(32, FRAME_BYTES))).toBe(true)
  })

  it("reports frames a real carrier would not accept", async () => {
    const call = await place()
    const stream = await gateway.stream()
    await stream.nth("start")
    const problems: Array<string> = []
    call.on("protocolError", (message) => problems.push(message))
    stream.socket.send(JSON.stringify({ event: "media", streamSid: "MZwrong", media: { payload: "//8=" } }))
    stream.socket.send(JSON.stringify({ event: "media", media: { payload: "//8=" } }))
    stream.socket.send(JSON.stringify({ event: "dance", streamSid: call.streamId }))
    stream.socket.send("{not json")
    stream.socket.send(JSON.stringify({ event: "media", streamSid: call.streamId, media: { payload: "***" } }))
    await call.pause(100)
    expect(problems).toHaveLength(5)
    expect(problems[0]).toContain("MZwrong")
    expect(problems[1]).toContain("streamSid undefined")
    expect(problems[2]).toContain("dance")
    expect(problems[3]).toContain("not JSON")
    expect(problems[4]).toContain("base64")
  })

  it("tells who closed the stream", async () => {
    const call = await place()
    const stream = await gateway.stream()
    await stream.nth("start")
    stream.socket.close(4001, "no agent")
    expect(await call.closed).toEqual({ code: 4001, reason: "no agent", by: "gateway" })
    expect(call.isOpen).toBe(false)
    expect(await call.play(silence(100))).toEqual({ framesSent: 0, completed: false })
  })

  it("connects straight to a stream URL without a webhook", async () => {
    const call = await connectTwilioStream({ url: `${gateway.url.replace("http", "ws")}/relay/abc`, customParameters: { k: "v" } })
    calls.push(call)
    const stream = await gateway.stream()
    const start = await stream.nth("start")
    expect(stream.request.url).toBe("/relay/abc")
    expect(start.start.customParameters).toEqual({ k: "v" })
    expect(gateway.webhooks).toHaveLength(0)
  })
})

describe("simulated Twilio call: signatures and failures", () => {
  const authToken = "12345678901234567890123456789012"

  it("signs the webhook and the stream upgrade so Twilio's own validator accepts them", async () => {
    const gateway = await startFakeGateway()
    try {
      const call = await placeTwilioCall({ gatewayUrl: gateway.url, agentId: "a", environmentId: "e", authToken })
      const hook = gateway.webhooks[0]!
      expect(twilio.validateRequest(authToken, String(hook.headers["x-twilio-signature"]), hook.url, hook.form)).toBe(true)
      expect(twilio.validateRequest("another-token-0000000000000000000", String(hook.headers["x-twilio-signature"]), hook.url, hook.form)).toBe(false)
      const stream = await gateway.stream()
      const streamUrl = call.entry!.stream.url
      expect(twilio.validateRequest(authToken, String(stream.request.headers["x-twilio-signature"]), streamUrl, {})).toBe(true)
      await call.hangup()
    } finally {
      await gateway.close()
    }
  })

  it("signs over the public URL and can reach the stream on the gateway's own origin", async () => {
    const gateway = await startFakeGateway({
      answer: () => ({
        status: 200,
        body: `<Response><Connect><Stream url="wss://calls.example.com/telephony/twilio/stream"/></Connect></Response>`
      })
    })
    try {
      const call = await placeTwilioCall({
        gatewayUrl: gateway.url,
        publicUrl: "https://calls.example.com",
        agentId: "a",
        environmentId: "e",
        authToken,
        streamVia: "gateway"
      })
      const hook = gateway.webhooks[0]!
      const publicHookUrl = `https://calls.example.com/telephony/twilio/voice?agentId=a&environmentId=e`
      expect(twilio.validateRequest(authToken, String(hook.headers["x-twilio-signature"]), publicHookUrl, hook.form)).toBe(true)
      const stream = await gateway.stream()
      expect(call.entry?.connectUrl).toBe(`${gateway.url.replace("http", "ws")}/telephony/twilio/stream`)
      expect(
        twilio.validateRequest(authToken, String(stream.request.headers["x-twilio-signature"]), "wss://calls.example.com/telephony/twilio/stream", {})
      ).toBe(true)
      await call.hangup()
    } finally {
      await gateway.close()
    }
  })

  it("fails with a SimError saying what the gateway did", async () => {
    const refusing = await startFakeGateway({ answer: () => ({ status: 403, body: "forbidden" }) })
    const saying = await startFakeGateway({ answer: () => ({ status: 200, body: "<Response><Say>Sorry</Say><Hangup/></Response>" }) })
    const closed = await startFakeGateway({ refuseUpgrade: () => 401 })
    try {
      const options = { agentId: "a", environmentId: "e" }
      await expect(placeTwilioCall({ gatewayUrl: refusing.url, ...options })).rejects.toMatchObject({ kind: "webhook", status: 403 })
      await expect(placeTwilioCall({ gatewayUrl: saying.url, ...options })).rejects.toThrow("no <Connect><Stream>")
      const refused = await placeTwilioCall({ gatewayUrl: closed.url, ...options }).catch((error) => error)
      expect(refused).toBeInstanceOf(SimError)
      expect(refused).toMatchObject({ kind: "connect", status: 401 })
      await expect(placeTwilioCall({ gatewayUrl: "http://127.0.0.1:1", ...options })).rejects.toThrow("unreachable")
    } finally {
      await Promise.all([refusing.close(), saying.close(), closed.close()])
    }
  })
})
