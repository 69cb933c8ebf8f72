import { existsSync, mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MULAW_TO_LINEAR } from "../../sim/Mulaw.js"
import { G722Decoder, G722Encoder } from "../../src/audio/G722.js"
import { alawToLinear, comfortNoiseFrames, linearToAlaw, MULAW_8K } from "../../src/kernel/AudioFormat.js"
import { parseWav } from "../../src/recording/Wav.js"
import { ADMIN_KEY, uniqueId } from "../support/testApp.js"
import {
  audioFrames,
  type CarrierCall,
  dialInAgent,
  type Gateway,
  type Peer,
  sessionIdOf,
  startGateway,
  telnyxCall,
  twilioCall,
  until
} from "../livecall/callHarness.js"

/**
 * Recorded calls on the production wiring (docs/recording.md): the WAV's left channel is what the
 * caller sent, placed by the carrier's timestamps; the right channel is what the agent sent, from
 * where the carrier's clock stood when it arrived, back to back; paused stretches are silent.
 * Caller and agent steps are taken in lockstep (each waits until the other side received it), so
 * where each frame lands is decided by the order of events, never by timing.
 */

const speech = [...audioFrames("caller-appointment.ulaw"), ...audioFrames("agent-greeting.ulaw")]
/** Real speech, each frame stamped in its first two bytes so no two frames are alike. */
const frames = (owner: number, count: number, offset = 0) =>
  Array.from({ length: count }, (_, n) => {
    const bytes = Buffer.from(speech[(offset + n) % speech.length]!, "base64")
    bytes[0] = owner
    bytes[1] = n & 0x7f
    return bytes.toString("base64")
  })

/** Samples of a mu-law payload, decoded by the simulator's own G.711 table. */
const pcmOf = (payload: string) => Array.from(Buffer.from(payload, "base64"), (byte) => MULAW_TO_LINEAR[byte]!)

const channel = (samples: Int16Array, which: 0 | 1, from: number, length: number) =>
  Array.from({ length }, (_, i) => samples[(from + i) * 2 + which] ?? Number.NaN)

const silent = (samples: Int16Array, which: 0 | 1, from: number, length: number) => channel(samples, which, from, length).every((s) => s === 0)

const get = (gateway: Gateway, path: string, key = ADMIN_KEY, headers: Record<string, string> = {}) =>
  fetch(`${gateway.httpBase}${path}`, { headers: { authorization: `Bearer ${key}`, ...headers } })

const recordingPath = (agentId: string, sessionId: string) => `/v1/agents/${agentId}/sessions/${sessionId}/recording`

/** Sends caller frames numbered `chunks` (timestamp = chunk * 20 ms), in the given order, and waits until the agent has them all. */
const callerSays = async (call: CarrierCall, agent: Peer, payloads: ReadonlyArray<string>, chunks: ReadonlyArray<number>) => {
  const before = agent.events("media").length
  for (let i = 0; i < payloads.length; i++) call.media(payloads[i]!, chunks[i]!)
  await agent.waitForEvent("media", before + payloads.length)
}

/** The agent sends `payloads`; waits until the carrier has them all (so they were recorded where the clock stood). */
const agentSays = async (call: CarrierCall, agent: Peer, payloads: ReadonlyArray<string>) => {
  const before = call.sentMedia().length
  for (const payload of payloads) agent.send({ event: "media", streamSid: "MZ", media: { payload } })
  await call.peer.waitForEvent("media", before + payloads.length)
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i)

describe("recorded calls", () => {
  let gateway: Gateway
  let recordingsDir: string
  beforeAll(async () => {
    recordingsDir = mkdtempSync(join(tmpdir(), "callgate-recordings-"))
    gateway = await startGateway({ env: { RECORDINGS_DIR: recordingsDir, LOG_LEVEL: process.env.TEST_LOG ?? "none" } })
  })
  afterAll(() => gateway.close())

  const recordedLine = async (patch: { agentFailoverTimeout?: number } = {}) => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { recording: "on", ...patch })
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    return { agentId, env, agent }
  }

  it("Twilio: caller left and agent right, sample for sample, gaps and the paused stretch silent, pauses listed", async () => {
    const { agentId, env, agent } = await recordedLine()
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid }), callSid })
    call.start()
    await agent.waitForEvent("start")
    const sessionId = sessionIdOf(agent)

    const caller = frames(1, 170)
    const answer = frames(2, 25, 300)
    const [quiet, loud] = frames(3, 2, 400)
    // Chunks 1..50 (timestamps 20..1000 ms: the first 20 ms carry nothing), then the agent answers.
    await callerSays(call, agent, caller.slice(0, 50), range(1, 50))
    await agentSays(call, agent, answer)
    await callerSays(call, agent, caller.slice(50, 100), range(51, 100))
    // The carrier sends nothing for chunks 101..120: 400 ms of silence on the caller's side.
    await callerSays(call, agent, caller.slice(120, 130), range(121, 130))
    // A malformed recording event: an error back to the agent, the call goes on.
    agent.send({ event: "recording", recording: { paused: "yes" } })
    await agent.waitForEvent("error")
    expect(agent.events("error")[0].error.message).toMatch(/invalid recording event/)
    agent.send({ event: "recording", recording: { paused: true } })
    await agentSays(call, agent, [quiet!])
    await callerSays(call, agent, caller.slice(130, 150), range(131, 150))
    agent.send({ event: "recording", recording: { paused: false } })
    await agentSays(call, agent, [loud!])
    await callerSays(call, agent, caller.slice(150, 170), range(151, 170))
    call.stop()

    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended.recording).toEqual({
      url: `https://callgate.test${recordingPath(agentId, sessionId)}`,
      durationMs: 3420,
      pauses: [{ startMs: 2620, endMs: 3020 }]
    })
    const response = await get(gateway, recordingPath(agentId, sessionId))
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toBe("audio/wav")
    const wav = parseWav(Buffer.from(await response.arrayBuffer()))
    expect([wav.channels, wav.sampleRate, wav.bitsPerSample]).toEqual([2, 8000, 16])
    const { samples } = wav
    expect(samples.length / 2).toBe(3420 * 8)

    // Caller: chunk n at n * 160 samples.
    expect(silent(samples, 0, 0, 160)).toBe(true)
    for (const n of [...range(1, 100), ...range(121, 130), ...range(151, 170)]) {
      expect(channel(samples, 0, n * 160, 160), `caller chunk ${n}`).toEqual(pcmOf(caller[n - 1]!))
    }
    expect(silent(samples, 0, 101 * 160, 20 * 160), "the 400 ms the carrier sent nothing").toBe(true)
    // Agent: from the end of chunk 50 (8160), back to back; silent before and after.
    expect(silent(samples, 1, 0, 8160)).toBe(true)
    answer.forEach((payload, k) => expect(channel(samples, 1, 8160 + k * 160, 160), `agent frame ${k}`).toEqual(pcmOf(payload)))
    expect(silent(samples, 1, 8160 + 25 * 160, 20960 - 12160)).toBe(true)
    // Paused from 2620 ms (the end of chunk 130) to 3020 ms: both channels silent, the agent's frame included.
    expect(silent(samples, 0, 20960, 3200)).toBe(true)
    expect(silent(samples, 1, 20960, 3200)).toBe(true)
    // After resuming, the agent's next frame plays at the clock (3020 ms).
    expect(channel(samples, 1, 24160, 160)).toEqual(pcmOf(loud!))
    // The sidecar says the same.
    const meta = JSON.parse(readFileSync(join(recordingsDir, agentId, `${sessionId}.json`), "utf8"))
    expect(meta).toMatchObject({ state: "complete", durationMs: 3420, pauses: [{ startMs: 2620, endMs: 3020 }] })
  })

  it("agent failover: the agent channel holds the first agent, the comfort noise of the hold, then the second agent; the caller channel every frame at its time", async () => {
    const { agentId, env, agent: first } = await recordedLine({ agentFailoverTimeout: 30 })
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid }), callSid })
    call.start()
    await first.waitForEvent("start")
    const sessionId = sessionIdOf(first)

    const caller = frames(10, 140)
    const firstAnswer = frames(11, 25, 300)
    const secondAnswer = frames(12, 15, 600)
    const noise = comfortNoiseFrames(MULAW_8K)
    // Chunks 1..50, the first agent answers (8160..12160), chunks 51..100 play its answer out (clock 16160).
    await callerSays(call, first, caller.slice(0, 50), range(1, 50))
    await agentSays(call, first, firstAnswer)
    await callerSays(call, first, caller.slice(50, 100), range(51, 100))

    // The first agent's socket vanishes (1006, no close frame): the call holds, comfort noise goes to the carrier.
    first.ws.terminate()
    await call.peer.waitForEvent("clear")
    // The caller goes on talking during the hold, one frame per comfort-noise frame the carrier got, so
    // the noise (at the carrier's clock when each caller frame arrives) never falls behind the caller.
    for (const n of range(101, 120)) {
      await until(() => call.sentMedia().length >= firstAnswer.length + (n - 100), `comfort noise frame ${n - 100}`)
      call.media(caller[n - 1]!, n)
    }
    // The second agent dials in and is handed the call, the held caller frames replayed to it.
    const second = await dialInAgent(gateway, agentId, env.id)
    await second.waitForEvent("media", 20)
    expect(second.received.map((m) => m.event).slice(0, 3)).toEqual(["connected", "start", "resume"])
    expect(second.events("media").map((m) => m.media.payload)).toEqual(caller.slice(100, 120))
    await agentSays(call, second, secondAnswer)
    await callerSays(call, second, caller.slice(120, 140), range(121, 140))
    call.stop()

    // What the carrier was sent: the first answer, comfort noise (its frames in turn from the first), the second answer.
    const sent = call.sentMedia()
    const held = sent.length - firstAnswer.length - secondAnswer.length
    expect(held).toBeGreaterThanOrEqual(20)
    expect(sent.slice(0, firstAnswer.length)).toEqual(firstAnswer)
    expect(sent.slice(firstAnswer.length, firstAnswer.length + held)).toEqual(Array.from({ length: held }, (_, k) => noise[k % noise.length]))
    expect(sent.slice(firstAnswer.length + held)).toEqual(secondAnswer)

    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended).toMatchObject({ status: "completed", endReason: "caller_hangup", agentFailovers: 1 })
    // The noise from the loss (16160) back to back, then the second answer right after it.
    const noiseAt = 16160
    const secondAt = noiseAt + held * 160
    const end = Math.max(141 * 160, secondAt + secondAnswer.length * 160)
    expect(ended.recording?.durationMs).toBe(end / 8)
    const wav = parseWav(Buffer.from(await (await get(gateway, recordingPath(agentId, sessionId))).arrayBuffer()))
    const { samples } = wav
    expect(samples.length / 2).toBe(end)

    // Caller: every chunk at its own time, those said during the hold included.
    expect(silent(samples, 0, 0, 160)).toBe(true)
    for (const n of range(1, 140)) expect(channel(samples, 0, n * 160, 160), `caller chunk ${n}`).toEqual(pcmOf(caller[n - 1]!))
    // Agent: silent, the first answer, silent while the caller played it out, the hold's comfort noise, the second answer.
    expect(silent(samples, 1, 0, 8160)).toBe(true)
    firstAnswer.forEach((payload, k) => expect(channel(samples, 1, 8160 + k * 160, 160), `first agent frame ${k}`).toEqual(pcmOf(payload)))
    expect(silent(samples, 1, 12160, noiseAt - 12160)).toBe(true)
    const hold = channel(samples, 1, noiseAt, held * 160)
    expect(hold).toEqual(Array.from({ length: held }, (_, k) => pcmOf(noise[k % noise.length]!)).flat())
    // Comfort noise: not silence, and far below speech.
    expect(hold.filter((sample) => sample !== 0).length).toBeGreaterThan(hold.length / 2)
    expect(Math.max(...hold.map(Math.abs))).toBeLessThanOrEqual(32)
    secondAnswer.forEach((payload, k) => expect(channel(samples, 1, secondAt + k * 160, 160), `second agent frame ${k}`).toEqual(pcmOf(payload)))
    expect(silent(samples, 1, secondAt + secondAnswer.length * 160, end - secondAt - secondAnswer.length * 160)).toBe(true)
    second.close()
  })

  it("Telnyx with reordered chunks: the caller's channel is in chunk order, the agent's in step", async () => {
    const { agentId, env, agent } = await recordedLine()
    const callControlId = `v3:${uniqueId("cc")}`
    const call = await telnyxCall(gateway, {
      token: gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId: callControlId }),
      callControlId
    })
    call.start()
    await agent.waitForEvent("start")
    const sessionId = sessionIdOf(agent)
    const caller = frames(5, 60)
    // Pairs swapped and a run of four reversed: 2,1,4,3,...
    const order = range(1, 40).map((n) => (n % 2 === 1 ? n + 1 : n - 1))
    const before = agent.events("media").length
    for (const n of order) call.media(caller[n - 1]!, n)
    await agent.waitForEvent("media", before + 40)
    const answer = frames(6, 10, 500)
    await agentSays(call, agent, answer)
    const tail = [44, 43, 42, 41, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60]
    const again = agent.events("media").length
    for (const n of tail) call.media(caller[n - 1]!, n)
    await agent.waitForEvent("media", again + tail.length)
    call.stop()

    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended.recording?.durationMs).toBe(1220)
    const response = await get(gateway, recordingPath(agentId, sessionId))
    const { samples } = parseWav(Buffer.from(await response.arrayBuffer()))
    for (const n of range(1, 60)) expect(channel(samples, 0, n * 160, 160), `caller chunk ${n}`).toEqual(pcmOf(caller[n - 1]!))
    // The answer starts where the caller's 40th chunk ends (820 ms).
    answer.forEach((payload, k) => expect(channel(samples, 1, 6560 + k * 160, 160), `agent frame ${k}`).toEqual(pcmOf(payload)))
    expect(silent(samples, 1, 0, 6560)).toBe(true)
  })

  // Telnyx streams in PCMA, L16 and G.722: each channel holds the samples sent, decoded (A-law by G.711, L16 as it is,
  // G.722 by one decoder over each direction's stream), at the call's rate.
  interface StreamFormat {
    readonly encoding: string
    readonly sampleRate: 8000 | 16000
    /** Each direction's frames of samples to payloads, and back (G.722 through one encoder, one decoder, per stream). */
    readonly encode: (frames: ReadonlyArray<ReadonlyArray<number>>) => Array<string>
    readonly decode: (payloads: ReadonlyArray<string>) => Array<Array<number>>
  }
  const alaw: StreamFormat = {
    encoding: "PCMA",
    sampleRate: 8000,
    encode: (frames) => frames.map((samples) => Buffer.from(samples.map(linearToAlaw)).toString("base64")),
    decode: (payloads) => payloads.map((payload) => Array.from(Buffer.from(payload, "base64"), alawToLinear))
  }
  const l16 = (sampleRate: 8000 | 16000): StreamFormat => ({
    encoding: "L16",
    sampleRate,
    encode: (frames) =>
      frames.map((samples) => {
        const bytes = Buffer.alloc(samples.length * 2)
        samples.forEach((sample, i) => bytes.writeInt16BE(sample, i * 2))
        return bytes.toString("base64")
      }),
    decode: (payloads) =>
      payloads.map((payload) => {
        const bytes = Buffer.from(payload, "base64")
        return Array.from({ length: bytes.length / 2 }, (_, i) => bytes.readInt16BE(i * 2))
      })
  })
  const g722: StreamFormat = {
    encoding: "G722",
    sampleRate: 16000,
    encode: (frames) => {
      const encoder = new G722Encoder()
      return frames.map((samples) => {
        const codes = Buffer.alloc(samples.length / 2)
        encoder.encode(Int16Array.from(samples), samples.length, codes)
        return codes.toString("base64")
      })
    },
    decode: (payloads) => {
      const decoder = new G722Decoder()
      return payloads.map((payload) => {
        const pcm = new Int16Array(320)
        decoder.decode(Buffer.from(payload, "base64"), 160, pcm)
        return Array.from(pcm)
      })
    }
  }
  it.each<[string, StreamFormat]>([
    ["PCMA", alaw],
    ["L16 at 8 kHz", l16(8000)],
    ["L16 at 16 kHz", l16(16000)],
    ["G722 (16 kHz)", g722]
  ])("Telnyx %s: both channels hold the samples sent, sample for sample, at the call's rate", async (_name, format) => {
    const { agentId, env, agent } = await recordedLine()
    const callControlId = `v3:${uniqueId("cc")}`
    const call = await telnyxCall(gateway, {
      token: gateway.issueToken({ agentId, environmentId: env.id, kind: "telnyx-call-control", callId: callControlId }),
      callControlId,
      encoding: format.encoding,
      // Telnyx announces G.722 at its RTP clock rate.
      sampleRate: format.encoding === "G722" ? 8000 : format.sampleRate
    })
    call.start()
    await agent.waitForEvent("start")
    const sessionId = sessionIdOf(agent)
    const perFrame = (format.sampleRate / 1000) * 20
    /** Real speech in the call's format (at 16 kHz each sample held for two), stamped so that no two frames are alike. */
    const framesIn = (owner: number, count: number, offset: number) =>
      format.encode(
        Array.from({ length: count }, (_, n) => {
          const samples = pcmOf(speech[(offset + n) % speech.length]!).flatMap((sample) => (perFrame === 320 ? [sample, sample] : [sample]))
          samples[0] = owner * 1000 + n
          samples[1] = -(owner * 1000 + n)
          return samples
        })
      )
    const caller = framesIn(1, 40, 0)
    // Chunks 1..30 with pairs swapped (Telnyx's reordering), then the agent's answer, then chunks 31..40.
    await callerSays(call, agent, range(1, 30).map((n) => caller[(n % 2 === 1 ? n + 1 : n - 1) - 1]!), range(1, 30).map((n) => (n % 2 === 1 ? n + 1 : n - 1)))
    const answer = framesIn(2, 10, 200)
    await agentSays(call, agent, answer)
    await callerSays(call, agent, caller.slice(30, 40), range(31, 40))
    call.stop()

    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended.recording?.durationMs).toBe(820)
    const wav = parseWav(Buffer.from(await (await get(gateway, recordingPath(agentId, sessionId))).arrayBuffer()))
    expect([wav.channels, wav.sampleRate, wav.bitsPerSample]).toEqual([2, format.sampleRate, 16])
    const { samples } = wav
    expect(samples.length / 2).toBe(41 * perFrame)
    expect(silent(samples, 0, 0, perFrame)).toBe(true)
    const callerSamples = format.decode(caller)
    for (const n of range(1, 40)) expect(channel(samples, 0, n * perFrame, perFrame), `caller chunk ${n}`).toEqual(callerSamples[n - 1])
    // The answer starts where the caller's 30th chunk ends (620 ms); the agent's channel is silent before it.
    expect(silent(samples, 1, 0, 31 * perFrame)).toBe(true)
    format.decode(answer).forEach((decoded, k) => expect(channel(samples, 1, (31 + k) * perFrame, perFrame), `agent frame ${k}`).toEqual(decoded))
  })

  it("Range requests, DELETE, and scoped keys: another agent's key finds nothing", async () => {
    const { agentId, env, agent } = await recordedLine()
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid }), callSid })
    call.start()
    await agent.waitForEvent("start")
    const sessionId = sessionIdOf(agent)
    await callerSays(call, agent, frames(7, 50), range(1, 50))
    // While the call runs, the recording is not served yet.
    expect((await get(gateway, recordingPath(agentId, sessionId))).status).toBe(409)
    call.stop()
    await gateway.outbox.forSession(sessionId)

    const whole = Buffer.from(await (await get(gateway, recordingPath(agentId, sessionId))).arrayBuffer())
    expect(whole.length).toBe(44 + 1020 * 8 * 4)
    const partial = await get(gateway, recordingPath(agentId, sessionId), ADMIN_KEY, { range: "bytes=100-1099" })
    expect(partial.status).toBe(206)
    expect(partial.headers.get("content-range")).toBe(`bytes 100-1099/${whole.length}`)
    expect(Buffer.from(await partial.arrayBuffer())).toEqual(whole.subarray(100, 1100))
    const suffix = await get(gateway, recordingPath(agentId, sessionId), ADMIN_KEY, { range: "bytes=-500" })
    expect(suffix.status).toBe(206)
    expect(Buffer.from(await suffix.arrayBuffer())).toEqual(whole.subarray(whole.length - 500))
    const beyond = await get(gateway, recordingPath(agentId, sessionId), ADMIN_KEY, { range: `bytes=${whole.length + 10}-` })
    expect(beyond.status).toBe(416)
    expect(beyond.headers.get("content-range")).toBe(`bytes */${whole.length}`)

    const createKey = async (agentIds: Array<string>) => {
      const res = await fetch(`${gateway.httpBase}/v1/api-keys`, {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ name: "recordings", agentIds })
      })
      return ((await res.json()) as { data: { key: string } }).data.key
    }
    const own = await createKey([agentId])
    const otherAgent = uniqueId("agent")
    const other = await createKey([otherAgent])
    const byOwnKey = await get(gateway, recordingPath(agentId, sessionId), own)
    expect(byOwnKey.status).toBe(200)
    expect(Buffer.from(await byOwnKey.arrayBuffer())).toEqual(whole)
    // The other agent's key, on its own agent's path with this session's id: no such recording.
    const byOtherKey = await get(gateway, recordingPath(otherAgent, sessionId), other)
    expect(byOtherKey.status).toBe(404)
    expect(((await byOtherKey.json()) as { error: { code: string } }).error.code).toBe("NOT_FOUND")
    // On this agent's path it is refused before anything is looked up (as every /v1/agents/{agentId} route).
    expect((await get(gateway, recordingPath(agentId, sessionId), other)).status).toBe(403)
    const deletedByOther = await fetch(`${gateway.httpBase}${recordingPath(otherAgent, sessionId)}`, { method: "DELETE", headers: { authorization: `Bearer ${other}` } })
    expect(deletedByOther.status).toBe(404)

    const deleted = await fetch(`${gateway.httpBase}${recordingPath(agentId, sessionId)}`, { method: "DELETE", headers: { authorization: `Bearer ${own}` } })
    expect(deleted.status).toBe(204)
    expect((await get(gateway, recordingPath(agentId, sessionId))).status).toBe(404)
    expect(existsSync(join(recordingsDir, agentId, `${sessionId}.wav`))).toBe(false)
  })

  it("an environment with recording off records nothing", async () => {
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId)
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid }), callSid })
    call.start()
    await agent.waitForEvent("start")
    const sessionId = sessionIdOf(agent)
    await callerSays(call, agent, frames(8, 10), range(1, 10))
    // Pausing an unrecorded call is no error.
    agent.send({ event: "recording", recording: { paused: true } })
    await agentSays(call, agent, frames(9, 1))
    call.stop()
    const ended = await gateway.outbox.forSession(sessionId)
    expect(ended.recording).toBeUndefined()
    expect(agent.events("error")).toEqual([])
    expect((await get(gateway, recordingPath(agentId, sessionId))).status).toBe(404)
    expect(existsSync(join(recordingsDir, agentId))).toBe(false)
  })

  it("the mode the call's admission read decides, with no read at the stream: a stream admitted off is not recorded, one admitted on is", async () => {
    // The environment says the opposite of each token: only the admission's word can explain the outcome.
    const agentId = uniqueId("agent")
    const env = await gateway.createEnvironment(agentId, { recording: "on" })
    const agent = await dialInAgent(gateway, agentId, env.id)
    await until(() => gateway.idleAgents(agentId, env.id) === 1, "an idle agent")
    const callSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const call = await twilioCall(gateway, { token: gateway.issueToken({ agentId, environmentId: env.id, kind: "twilio", callId: callSid, recording: "off" }), callSid })
    call.start()
    await agent.waitForEvent("start")
    const sessionId = sessionIdOf(agent)
    await callerSays(call, agent, frames(8, 10), range(1, 10))
    call.stop()
    expect((await gateway.outbox.forSession(sessionId)).recording).toBeUndefined()
    expect((await get(gateway, recordingPath(agentId, sessionId))).status).toBe(404)

    const offAgentId = uniqueId("agent")
    const offEnv = await gateway.createEnvironment(offAgentId)
    const offAgent = await dialInAgent(gateway, offAgentId, offEnv.id)
    await until(() => gateway.idleAgents(offAgentId, offEnv.id) === 1, "an idle agent")
    const onSid = `CA${uniqueId("c").replace(/[^A-Za-z0-9]/g, "")}`
    const onCall = await twilioCall(gateway, { token: gateway.issueToken({ agentId: offAgentId, environmentId: offEnv.id, kind: "twilio", callId: onSid, recording: "on" }), callSid: onSid })
    onCall.start()
    await offAgent.waitForEvent("start")
    const onSession = sessionIdOf(offAgent)
    await callerSays(onCall, offAgent, frames(8, 10), range(1, 10))
    onCall.stop()
    expect((await gateway.outbox.forSession(onSession)).recording).toMatchObject({ url: expect.stringContaining(onSession) })
    expect((await get(gateway, recordingPath(offAgentId, onSession))).status).toBe(200)
  })
})
