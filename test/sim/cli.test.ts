import { spawn } from "node:child_process"
import { afterEach, describe, expect, it } from "vitest"
import { EnergyTurnDetector } from "../../examples/agents/energy-turn-detector.js"
import { readUlawFile } from "../../sim/AudioSource.js"
import { FRAME_BYTES } from "../../sim/Mulaw.js"
import { type FakeGateway, type FakeStream, startFakeGateway } from "./fakeGateway.js"

const reply = readUlawFile("test/fixtures/audio/agent-greeting.ulaw").subarray(20 * FRAME_BYTES, 30 * FRAME_BYTES)

/** The fake gateway answers each caller turn (or digit) itself, with audio and a mark. */
const answerTurns = (stream: FakeStream) => {
  const detector = new EnergyTurnDetector({ endSilenceMs: 300 })
  let replies = 0
  const answer = () => {
    stream.sendMedia(reply)
    stream.sendMark(`reply-${++replies}`)
  }
  stream.socket.on("message", (data) => {
    const message = JSON.parse(data.toString())
    if (message.event === "media" && detector.push(Buffer.from(message.media.payload, "base64"))) answer()
    if (message.event === "dtmf" && message.dtmf.digit === "2") answer()
  })
}

const runCli = (args: Array<string>) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", "sim/cli.ts", ...args], { stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk) => (stdout += chunk))
    child.stderr.on("data", (chunk) => (stderr += chunk))
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  })

describe("callgate-sim", () => {
  let gateway: FakeGateway | undefined
  afterEach(async () => {
    await gateway?.close()
    gateway = undefined
  })

  it.each(["twilio", "telnyx"])("places a %s call, reports each answer's latency and exits 0 on hangup", async (provider) => {
    gateway = await startFakeGateway()
    void gateway.stream().then(answerTurns)
    const result = await runCli([
      "--gateway", gateway.url, "--provider", provider, "--agent", "agent_1", "--environment", "env_1",
      "--audio", "speech:600", "--turns", "2", "--dtmf", "12", "--answer-timeout", "3", "--pause", "100"
    ])
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
    const out = result.stdout
    expect(out).toContain(`placing a ${provider} call on ${gateway.url}`)
    expect(out).toMatch(/webhook answered HTTP 200/)
    expect(out).toMatch(/turn 1: sent 30 frames; agent answered after \d+ ms and sent 1 media frames \(200 ms of audio\)/)
    expect(out).toMatch(/turn 2: sent 30 frames; agent answered after \d+ ms/)
    expect(out).toContain(`echoed mark "reply-1" (played)`)
    expect(out).toMatch(/sending DTMF 12[\s\S]*agent answered the digits after \d+ ms/)
    expect(out).toMatch(/stream closed by the simulator: code 1000/)
    expect(out).toMatch(/summary: sent \d+ media frames \(\d+ voiced\), 2 DTMF; received 3 media frames .* 3 marks \(3 echoed\), 0 clears; response latency \d+ ms, \d+ ms$/m)
    const stream = gateway.streams[0]!
    expect(gateway.webhooks[0]!.path).toBe(provider === "twilio" ? "/telephony/twilio/voice" : "/telephony/telnyx/texml")
    expect(stream.events("stop")).toHaveLength(1)
  })

  it("reports a turn nobody answers, still hangs up normally, and exits 1 (the outcome is not answered)", async () => {
    gateway = await startFakeGateway()
    const result = await runCli(["--gateway", gateway.url, "--agent", "a", "--environment", "e", "--audio", "speech:200", "--turns", "1", "--answer-timeout", "0.3"])
    expect(result.code).toBe(1)
    expect(result.stdout).toContain("outcome: failed (0 of 1 turns answered)")
    expect(result.stdout).toMatch(/stream closed by the simulator: code 1000/)
    expect(result.stdout).toContain("turn 1: sent 10 frames; no answer within 0.3s")
    expect(result.stdout).toContain("response latency n/a")
  })

  it("exits 1 when the gateway refuses the call, 2 on bad usage", async () => {
    gateway = await startFakeGateway({ answer: () => ({ status: 404, body: "no such environment" }) })
    const refused = await runCli(["--gateway", gateway.url, "--agent", "a", "--environment", "e"])
    expect(refused.code).toBe(1)
    expect(refused.stdout).toContain("refused: the entry webhook answered HTTP 404 without a stream")
    expect(refused.stdout).toContain("the carrier was told: no such environment")
    expect(refused.stdout).toContain("expected answered: exit status 1")
    const asExpected = await runCli(["--gateway", gateway.url, "--agent", "a", "--environment", "e", "--expect", "refused"])
    expect(asExpected.code).toBe(0)
    const usage = await runCli(["--agent", "a"])
    expect(usage.code).toBe(2)
    expect(usage.stderr).toContain("--agent and --environment are required")
    const badAudio = await runCli(["--agent", "a", "--environment", "e", "--audio", "tune.mp3"])
    expect(badAudio.code).toBe(2)
    expect(badAudio.stderr).toContain("cannot tell what audio")
  })

  it("--codec streams a Telnyx call in the codec given; it is refused for Twilio and for codecs it does not know", async () => {
    gateway = await startFakeGateway()
    const result = await runCli([
      "--gateway", gateway.url, "--provider", "telnyx", "--codec", "L16;rate=16000", "--agent", "a", "--environment", "e",
      "--audio", "speech:200", "--turns", "1", "--answer-timeout", "0.3"
    ])
    expect(result.stdout).toMatch(/stream open \(telnyx [^,]+, L16;rate=16000\)/)
    const stream = gateway.streams[0]!
    expect(stream.events("start")[0].start.media_format).toEqual({ encoding: "L16", sample_rate: 16000, channels: 1 })
    expect(Buffer.from(stream.events("media")[0].media.payload, "base64")).toHaveLength(4 * FRAME_BYTES)
    const twilio = await runCli(["--agent", "a", "--environment", "e", "--codec", "PCMA"])
    expect(twilio.code).toBe(2)
    expect(twilio.stderr).toContain("--codec is for --provider telnyx")
    const unknown = await runCli(["--agent", "a", "--environment", "e", "--provider", "telnyx", "--codec", "OPUS"])
    expect(unknown.code).toBe(2)
    expect(unknown.stderr).toContain('--codec takes PCMU, PCMA, L16;rate=8000, L16;rate=16000, G722; got "OPUS"')
  })
})
