import { generateKeyPairSync, verify } from "node:crypto"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { readUlawFile } from "../../sim/AudioSource.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import type { SimCall } from "../../sim/SimCall.js"
import { connectTelnyxStream, placeTelnyxTexmlCall } from "../../sim/TelnyxCall.js"
import { G722Decoder } from "../../src/audio/G722.js"
import { linearToAlaw, mulawToLinear } from "../../src/kernel/AudioFormat.js"
import { simAudioCodec } from "../../sim/StreamCodec.js"
import { type FakeGateway, startFakeGateway } from "./fakeGateway.js"

const appointment = readUlawFile("test/fixtures/audio/caller-appointment.ulaw")
const payloadOf = (frame: any) => Buffer.from(frame.media.payload, "base64")

describe("simulated Telnyx call", () => {
  let gateway: FakeGateway
  const calls: Array<SimCall> = []
  const track = (call: SimCall) => (calls.push(call), call)

  beforeEach(async () => {
    gateway = await startFakeGateway()
  })
  afterEach(async () => {
    await Promise.all(calls.splice(0).map((call) => call.hangup()))
    await gateway.close()
  })

  it("posts the TeXML webhook and streams in Telnyx's dialect to the URL it names", async () => {
    const call = track(
      await placeTelnyxTexmlCall({ gatewayUrl: gateway.url, agentId: "agent_1", environmentId: "env_1", from: "+15551230001", to: "+15551230002" })
    )
    const hook = gateway.webhooks[0]!
    expect(hook.path).toBe("/telephony/telnyx/texml")
    expect(hook.query.get("agentId")).toBe("agent_1")
    expect(hook.form).toMatchObject({ From: "+15551230001", To: "+15551230002", Direction: "inbound" })
    expect(hook.form.CallSid).toMatch(/^v3:/)
    expect(hook.form.AccountSid).toBeTruthy()
    expect(call.entry?.stream.attributes).toMatchObject({ bidirectionalMode: "rtp", bidirectionalCodec: "PCMU" })
    expect(call.codec).toBe("PCMU")

    const stream = await gateway.stream()
    expect(stream.request.url).toBe("/telephony/telnyx/stream?token=abc.def")
    const start = await stream.nth("start")
    expect(stream.messages[0]).toEqual({ event: "connected", version: "1.0.0" })
    expect(start).toEqual({
      event: "start",
      sequence_number: "1",
      stream_id: call.streamId,
      start: {
        user_id: expect.any(String),
        call_control_id: hook.form.CallSid,
        call_session_id: hook.form.CallSessionId,
        from: "+15551230001",
        to: "+15551230002",
        tags: [],
        client_state: null,
        custom_parameters: {},
        media_format: { encoding: "PCMU", sample_rate: 8000, channels: 1 }
      }
    })
    const media = await stream.nth("media", 3)
    expect(media).toEqual({
      event: "media",
      sequence_number: "4",
      media: { track: "inbound", chunk: "3", timestamp: "40", payload: expect.any(String) },
      stream_id: call.streamId
    })
    expect(payloadOf(media)).toHaveLength(FRAME_BYTES)
  })

  it("sends DTMF, marks back, stop and error frames in snake_case with stream_id", async () => {
    const call = track(await placeTelnyxTexmlCall({ gatewayUrl: gateway.url, agentId: "a", environmentId: "e", encoding: "audio/x-mulaw" }))
    const stream = await gateway.stream()
    const start = await stream.nth("start")
    expect(start.start.media_format.encoding).toBe("audio/x-mulaw")
    await call.sendDtmf("5")
    stream.sendMedia(appointment.subarray(0, 2 * FRAME_BYTES), {}) // Telnyx frames need no stream_id
    stream.sendMark("m1", {})
    const echo = await stream.nth("mark")
    expect(echo).toEqual({ event: "mark", sequence_number: expect.any(String), mark: { name: "m1" }, stream_id: call.streamId })
    call.sendStreamError(100003, "malformed_frame", "bad frame")
    await call.hangup()
    await stream.until(() => stream.closed)
    const dtmf = stream.events("dtmf")[0]
    expect(dtmf).toMatchObject({ event: "dtmf", stream_id: call.streamId, dtmf: { digit: "5" } })
    expect(new Date(dtmf.occurred_at).getTime()).not.toBeNaN()
    expect(stream.events("error")[0]).toMatchObject({
      event: "error",
      stream_id: call.streamId,
      payload: { code: 100003, title: "malformed_frame", detail: "bad frame" }
    })
    expect(stream.messages.at(-1)).toEqual({
      event: "stop",
      sequence_number: expect.any(String),
      stop: { user_id: start.start.user_id, call_control_id: start.start.call_control_id },
      stream_id: call.streamId
    })
    expect(call.stats.protocolErrors).toBe(0)
  })

  it("shuffles media chunks within a window when asked; their numbers put them back in order", async () => {
    const call = track(
      await placeTelnyxTexmlCall({ gatewayUrl: gateway.url, agentId: "a", environmentId: "e", continuousMedia: false, shuffleWindow: 6, shuffleSeed: 3 })
    )
    const stream = await gateway.stream()
    const audio = appointment.subarray(0, 24 * FRAME_BYTES)
    await call.play(audio)
    await stream.until(() => stream.events("media").length === 24)
    const media = stream.events("media")
    const chunks = media.map((frame) => Number(frame.media.chunk))
    expect(chunks).not.toEqual([...chunks].sort((a, b) => a - b))
    expect([...chunks].sort((a, b) => a - b)).toEqual(Array.from({ length: 24 }, (_, i) => i + 1))
    // Frames only move within their window of six.
    chunks.forEach((chunk, position) => expect(Math.floor((chunk - 1) / 6)).toBe(Math.floor(position / 6)))
    const ordered = [...media].sort((a, b) => Number(a.media.chunk) - Number(b.media.chunk))
    expect(Buffer.concat(ordered.map(payloadOf)).equals(audio)).toBe(true)
    // Each frame keeps the sequence number and timestamp it was created with.
    for (const frame of media) {
      expect(Number(frame.sequence_number)).toBe(Number(frame.media.chunk) + 1)
      expect(Number(frame.media.timestamp) % 20).toBe(0)
    }
  })

  it("signs the webhook with Ed25519 over timestamp|body when given a key", async () => {
    const { publicKey, privateKey } = generateKeyPairSync("ed25519")
    track(await placeTelnyxTexmlCall({ gatewayUrl: gateway.url, agentId: "a", environmentId: "e", signingKey: privateKey }))
    const hook = gateway.webhooks[0]!
    const timestamp = String(hook.headers["telnyx-timestamp"])
    expect(Math.abs(Number(timestamp) - Date.now() / 1000)).toBeLessThan(10)
    const signature = Buffer.from(String(hook.headers["telnyx-signature-ed25519"]), "base64")
    expect(verify(null, Buffer.from(`${timestamp}|${hook.rawBody}`), publicKey, signature)).toBe(true)
    expect(verify(null, Buffer.from(`${timestamp}|${hook.rawBody}x`), publicKey, signature)).toBe(false)
  })

  it("connects straight to a stream URL with a stream auth token (Call Control)", async () => {
    const call = track(
      await connectTelnyxStream({
        url: `${gateway.url.replace("http", "ws")}/telephony/telnyx/stream`,
        streamAuthToken: "secret-token",
        callControlId: "v3:abc",
        customParameters: { x: "1" }
      })
    )
    const stream = await gateway.stream()
    const start = await stream.nth("start")
    expect(stream.request.headers["x-telnyx-streaming-auth-token"]).toBe("secret-token")
    expect(stream.messages[0]).toEqual({ event: "connected", version: "1.0.0", connected: { "x-telnyx-streaming-auth-token": "secret-token" } })
    expect(start.start).toMatchObject({ call_control_id: "v3:abc", custom_parameters: { x: "1" } })
    expect(start.stream_id).toBe(call.streamId)
  })

  describe("codecs", () => {
    /** This test's gateway answers with `options` instead of the default one. */
    const regateway = async (options: Parameters<typeof startFakeGateway>[0]) => {
      await gateway.close()
      gateway = await startFakeGateway(options)
    }
    /** A TeXML answer asking for `codec` at `rate` both ways, as callgate's is for an environment's telnyxStreamCodec. */
    const askingFor = (codec: string, rate: number) => ({
      answer: (_hook: unknown, origin: string) => ({
        status: 200,
        body:
          `<?xml version="1.0" encoding="UTF-8"?><Response><Connect><Stream url="${origin.replace(/^http/, "ws")}/telephony/telnyx/stream?token=abc.def" ` +
          `bidirectionalMode="rtp" codec="${codec}" bidirectionalCodec="${codec}" bidirectionalSamplingRate="${rate}"/></Connect></Response>`
      })
    })
    /** 8 kHz mu-law to big-endian 16-bit samples, each held for `repeat` samples. */
    const l16Of = (mulaw: Buffer, repeat: number) => {
      const out = Buffer.alloc(mulaw.length * 2 * repeat)
      mulaw.forEach((byte, i) => {
        for (let r = 0; r < repeat; r++) out.writeInt16BE(mulawToLinear(byte), (i * repeat + r) * 2)
      })
      return out
    }

    it.each([
      ["PCMU", "PCMU", 8000, (mulaw: Buffer) => mulaw],
      ["PCMA", "PCMA", 8000, (mulaw: Buffer) => Buffer.from(mulaw.map((byte) => linearToAlaw(mulawToLinear(byte))))],
      ["L16;rate=8000", "L16", 8000, (mulaw: Buffer) => l16Of(mulaw, 1)],
      ["L16;rate=16000", "L16", 16000, (mulaw: Buffer) => l16Of(mulaw, 2)]
    ] as const)(
      "%s: streams in the codec the <Stream> asks for, and hears the gateway's audio in it",
      async (codec, encoding, rate, toCodec) => {
        await regateway(askingFor(encoding, rate))
        const call = track(await placeTelnyxTexmlCall({ gatewayUrl: gateway.url, agentId: "a", environmentId: "e", continuousMedia: false }))
        expect(call.codec).toBe(codec)
        const stream = await gateway.stream()
        expect((await stream.nth("start")).start.media_format).toEqual({ encoding, sample_rate: rate, channels: 1 })
        const spoken = appointment.subarray(40 * FRAME_BYTES, 50 * FRAME_BYTES)
        await call.play(spoken)
        await stream.until(() => stream.events("media").length === 10)
        const sent = stream.events("media").map(payloadOf)
        // 20 ms frames of the codec: 160 bytes of G.711, 320 of L16 at 8 kHz, 640 at 16 kHz.
        expect(sent.map((frame) => frame.length)).toEqual(Array.from({ length: 10 }, () => (FRAME_BYTES * (encoding === "L16" ? 2 : 1) * rate) / 8000))
        if (rate === 8000) expect(Buffer.concat(sent)).toEqual(toCodec(spoken))
        else {
          // Each 8 kHz sample is sent as is, after one interpolated between it and the previous one.
          const samples = Buffer.concat(sent)
          for (let i = 0; i < spoken.length; i++) expect(samples.readInt16BE(i * 4 + 2)).toBe(mulawToLinear(spoken[i]!))
        }
        // The gateway's answer in the codec is heard as speech (and counted as 8 kHz audio).
        const heard = new Promise<Buffer>((resolve) => call.once("agentMedia", ({ payload }) => resolve(payload)))
        const reply = appointment.subarray(60 * FRAME_BYTES, 61 * FRAME_BYTES)
        stream.sendMedia(toCodec(reply), {})
        const payload = await heard
        expect(payload).toHaveLength(FRAME_BYTES)
        if (encoding !== "PCMA") expect(payload).toEqual(reply)
        else payload.forEach((byte, i) => expect(Math.abs(mulawToLinear(byte) - mulawToLinear(reply[i]!))).toBeLessThanOrEqual(Math.abs(mulawToLinear(reply[i]!)) / 8 + 16))
        expect(call.stats.protocolErrors).toBe(0)
      }
    )

    it("G722: streams 160-byte G.722 frames that callgate's decoder hears as the caller's speech, and reads the gateway's G.722 back", async () => {
      await regateway(askingFor("G722", 16000))
      const call = track(await placeTelnyxTexmlCall({ gatewayUrl: gateway.url, agentId: "a", environmentId: "e", continuousMedia: false }))
      expect(call.codec).toBe("G722")
      const stream = await gateway.stream()
      expect((await stream.nth("start")).start.media_format).toEqual({ encoding: "G722", sample_rate: 16000, channels: 1 })
      const spoken = appointment.subarray(40 * FRAME_BYTES, 60 * FRAME_BYTES)
      await call.play(spoken)
      await stream.until(() => stream.events("media").length === 20)
      const sent = stream.events("media").map(payloadOf)
      expect(sent.every((frame) => frame.length === FRAME_BYTES)).toBe(true)
      // Decoded by callgate's G.722 decoder, the speech keeps its level (a lossy coder: within a few dB).
      const decoder = new G722Decoder()
      const pcm = new Int16Array(sent.length * FRAME_BYTES * 2)
      decoder.decode(Buffer.concat(sent), sent.length * FRAME_BYTES, pcm)
      const rms = (samples: ArrayLike<number>, from = 0) => {
        let sum = 0
        for (let i = from; i < samples.length; i++) sum += samples[i]! * samples[i]!
        return Math.sqrt(sum / (samples.length - from))
      }
      const original = rms(Array.from(spoken, (byte) => mulawToLinear(byte)))
      expect(rms(pcm, 640)).toBeGreaterThan(original * 0.5)
      expect(rms(pcm, 640)).toBeLessThan(original * 2)
      // The gateway's G.722 is heard as 8 kHz mu-law, voiced.
      const heard = new Promise<{ payload: Buffer; voiced: boolean }>((resolve) => call.once("agentMedia", resolve))
      stream.sendMedia(Buffer.concat(sent.slice(5, 15)), {})
      const media = await heard
      expect(media.payload).toHaveLength(10 * FRAME_BYTES)
      expect(media.voiced).toBe(true)
    })

    it("every mu-law byte survives the simulator's L16 round trip at 8 and 16 kHz (the bench's frame stamps ride on it)", () => {
      const all = Buffer.from(Array.from({ length: FRAME_BYTES }, (_, i) => (i * 37 + 0x7f) & 0xff))
      all[0] = 0x7f
      all[1] = 0xff
      for (const codec of ["L16;rate=8000", "L16;rate=16000"] as const) {
        const coder = simAudioCodec(codec)
        expect(coder.decode(Buffer.from(coder.encode(all))), codec).toEqual(all)
      }
    })

    it("an explicit codec overrides the markup; a codec the simulator cannot stream is a clear error", async () => {
      await regateway(askingFor("PCMU", 8000))
      const call = track(await placeTelnyxTexmlCall({ gatewayUrl: gateway.url, agentId: "a", environmentId: "e", codec: "PCMA" }))
      expect((await (await gateway.stream()).nth("start")).start.media_format).toEqual({ encoding: "PCMA", sample_rate: 8000, channels: 1 })
      expect(call.codec).toBe("PCMA")
      const other = await startFakeGateway(askingFor("OPUS", 48000))
      try {
        await expect(placeTelnyxTexmlCall({ gatewayUrl: other.url, agentId: "a", environmentId: "e" })).rejects.toThrow(/asks for OPUS, which the simulator cannot stream/)
      } finally {
        await other.close()
      }
    })

    it("connectTelnyxStream streams in the codec it is given (what a Call Control answer asked for)", async () => {
      track(await connectTelnyxStream({ url: `${gateway.url.replace("http", "ws")}/telephony/telnyx/stream`, codec: "L16;rate=16000" }))
      const stream = await gateway.stream()
      expect((await stream.nth("start")).start.media_format).toEqual({ encoding: "L16", sample_rate: 16000, channels: 1 })
      expect(payloadOf(await stream.nth("media"))).toHaveLength(4 * FRAME_BYTES)
    })
  })

  it("flags a frame that names another stream", async () => {
    const call = track(await placeTelnyxTexmlCall({ gatewayUrl: gateway.url, agentId: "a", environmentId: "e" }))
    const stream = await gateway.stream()
    await stream.nth("start")
    const problems: Array<string> = []
    call.on("protocolError", (message) => problems.push(message))
    stream.sendMedia(appointment.subarray(0, FRAME_BYTES), { stream_id: "someone-else" })
    stream.sendClear({})
    await call.pause(100)
    expect(problems).toEqual([expect.stringContaining("someone-else")])
    expect(call.stats.clears).toBe(1)
  })
})
