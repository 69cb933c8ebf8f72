import { type ChildProcess, spawn } from "node:child_process"
import { performance } from "node:perf_hooks"
import { afterEach, describe, expect, it, vi } from "vitest"
import { WebSocket } from "ws"
import { type AnsweringAgentOptions, startAnsweringAgent } from "../../examples/agents/answering-agent.js"
import { startSilentAgent } from "../../examples/agents/silent-agent.js"
import { readUlawFile, silence } from "../../sim/AudioSource.js"
import { twilioDialect } from "../../sim/CarrierDialect.js"
import { readStamp } from "../../sim/FrameStamp.js"
import { FRAME_BYTES, framesOf, isVoicedFrame } from "../../sim/Mulaw.js"
import { type FakeGateway, type FakeStream, startFakeGateway } from "./fakeGateway.js"

const audio = (name: string) => readUlawFile(`test/fixtures/audio/${name}.ulaw`)
const callerTurn = audio("caller-appointment")
const reply = audio("agent-greeting").subarray(20 * FRAME_BYTES, 26 * FRAME_BYTES) // six voiced frames
const KEY = "agent-key-0123456789"

/** callgate's half of one agent socket, in the agent dialect (Twilio Media Streams). */
const callgateSide = (stream: FakeStream, sessionId = "ses_1") => {
  const dialect = twilioDialect({
    streamSid: `MZ${sessionId}`,
    accountSid: "AC0",
    callSid: "CA0",
    customParameters: { sessionId, agentId: "agent_1", environmentId: "env_1", from: "+15550001", to: "+15550002", direction: "inbound", provider: "twilio" }
  })
  let seq = 1
  let chunk = 1
  const send = (text: string) => stream.socket.readyState === WebSocket.OPEN && stream.socket.send(text)
  return {
    streamSid: dialect.streamId,
    start: () => (send(dialect.connected()), send(dialect.start(seq++))),
    /** Sends audio as fast as the socket takes it: the agents count frames, not wall time. */
    say: (audioToSend: Buffer) => {
      for (const frame of framesOf(audioToSend)) send(dialect.media(seq++, chunk, (chunk++ - 1) * 20, frame.toString("base64")))
    },
    dtmf: (digit: string) => send(dialect.dtmf(seq++, digit)),
    markPlayed: (name: string) => send(dialect.mark(seq++, name)),
    stop: () => (send(dialect.stop(seq++)), stream.socket.close(1000, "call ended"))
  }
}

/** Polls `check` until it holds, or fails after `timeoutMs` (a limit for a busy machine, never an assertion). */
const until = async (check: () => boolean, what: string, timeoutMs = 30_000) => {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

const agentMedia = (stream: FakeStream) => stream.events("media").map((m) => Buffer.from(m.media.payload, "base64"))

/**
 * The agents' frame clock in the test's hand: `performance.now`, which their FramePacer
 * (sim/FramePacer.ts) reads to decide which frames are due, stands still until `advance`
 * moves it. A frame therefore reaches the fake gateway only once the test moved the clock to
 * its due time, whatever the machine's load; `at` stamps each media frame with the clock's value
 * when it arrived.
 */
const manualFrameClock = (stream: FakeStream, cleanup: Array<() => Promise<void>>) => {
  let now = 1_000_000
  const spy = vi.spyOn(performance, "now").mockImplementation(() => now)
  cleanup.push(async () => void spy.mockRestore())
  const at: Array<number> = []
  stream.socket.on("message", (data) => {
    if (JSON.parse(data.toString()).event === "media") at.push(now)
  })
  return {
    at,
    now: () => now,
    /** Moves the clock one frame (20 ms) at a time until `frames` media frames have arrived. */
    stepUntil: async (frames: number) => {
      while (at.length < frames) {
        const before = at.length
        now += 20
        await until(() => at.length > before, `media frame ${before + 1}`)
      }
    }
  }
}

describe("example agents", () => {
  let gateway: FakeGateway
  const cleanup: Array<() => Promise<void>> = []
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step()
  })

  /** A fake /connect endpoint that checks the bearer key. */
  const connectEndpoint = async () => {
    gateway = await startFakeGateway({
      refuseUpgrade: (request) =>
        !request.url?.startsWith("/v1/agents/agent_1/environments/env_1/connect") ? 404 : request.headers.authorization !== `Bearer ${KEY}` ? 401 : undefined
    })
    cleanup.push(() => gateway.close())
    return gateway
  }

  const answering = async (options: Partial<AnsweringAgentOptions> = {}) => {
    await connectEndpoint()
    const agent = await startAnsweringAgent({
      gatewayUrl: gateway.url,
      agentId: "agent_1",
      environmentId: "env_1",
      apiKey: KEY,
      reply,
      responseLatencyMs: 20,
      ...options
    })
    cleanup.push(() => agent.close())
    await agent.ready()
    return agent
  }

  it("keeps `capacity` sockets open with its key and answers a caller turn with audio, then a mark", async () => {
    const agent = await answering({ capacity: 2 })
    expect(gateway.streams).toHaveLength(2)
    const stream = gateway.streams[0]!
    expect(stream.request.url).toBe("/v1/agents/agent_1/environments/env_1/connect")
    const calls: Array<string> = []
    agent.on("call", (call) => calls.push(call.customParameters.sessionId!))
    const callgate = callgateSide(stream)
    callgate.start()
    callgate.say(Buffer.concat([callerTurn, silence(1000)]))
    const mark = await stream.nth("mark")
    expect(mark).toEqual({ event: "mark", streamSid: callgate.streamSid, mark: { name: "reply-1" } })
    expect(Buffer.concat(agentMedia(stream)).equals(reply)).toBe(true)
    expect(stream.events("media").every((m) => m.streamSid === callgate.streamSid)).toBe(true)
    // The mark follows the last reply frame.
    expect(stream.messages.at(-1)).toBe(mark)
    expect(calls).toEqual(["ses_1"])
    expect(agent.stats).toMatchObject({ calls: 1, turns: 1, replies: 1 })
    // The other socket stayed idle.
    expect(gateway.streams[1]!.messages).toHaveLength(0)
  })

  it("answers speech over line noise, but never pure silence or line noise alone", async () => {
    const agent = await answering()
    const stream = gateway.streams[0]!
    const callgate = callgateSide(stream)
    // How many caller frames the agent had heard when it decided that a turn had ended.
    let heard = 0
    const turnsEndedAfter: Array<number> = []
    agent.on("callerMedia", () => void heard++)
    agent.on("turn", () => void turnsEndedAfter.push(heard))
    callgate.start()
    const quiet = framesOf(Buffer.concat([silence(3000), audio("line-noise"), audio("line-noise"), silence(1000)])).length
    callgate.say(Buffer.concat([silence(3000), audio("line-noise"), audio("line-noise"), silence(1000)]))
    callgate.say(Buffer.concat([audio("caller-appointment-noisy"), audio("line-noise")]))
    await stream.nth("mark")
    // One turn, and it ended after the speech began: the silence and noise before it were none.
    expect(agent.stats.turns).toBe(1)
    expect(turnsEndedAfter).toHaveLength(1)
    expect(turnsEndedAfter[0]).toBeGreaterThan(quiet)
    // All it sent is the one reply and its mark.
    expect(stream.messages.map((m) => m.event)).toEqual([...Array.from({ length: reply.length / FRAME_BYTES }, () => "media"), "mark"])
  })

  it("reopens its socket after each call", async () => {
    const agent = await answering()
    const first = callgateSide(gateway.streams[0]!)
    first.start()
    first.say(Buffer.concat([callerTurn, silence(1000)]))
    await gateway.streams[0]!.nth("mark")
    first.markPlayed("reply-1")
    const ended = new Promise((resolve) => agent.once("callEnded", resolve))
    first.stop()
    expect(await ended).toMatchObject({ code: 1000, turns: 1, replies: 1 })
    const second = await gateway.stream(1)
    expect(second.request.headers.authorization).toBe(`Bearer ${KEY}`)
    const callgate = callgateSide(second, "ses_2")
    callgate.start()
    callgate.say(Buffer.concat([callerTurn, silence(1000)]))
    await second.nth("mark")
    expect(agent.stats).toMatchObject({ calls: 2, replies: 2, callsEnded: 1 })
  })

  it("stalls after K turns: answers two, then hears the third and stays silent", async () => {
    const agent = await answering({ stallAfterTurns: 2 })
    const stream = gateway.streams[0]!
    const callgate = callgateSide(stream)
    const stalled: Array<number> = []
    agent.on("stalled", ({ turn }) => stalled.push(turn))
    callgate.start()
    for (const n of [1, 2]) {
      callgate.say(Buffer.concat([callerTurn, silence(1000)]))
      await stream.nth("mark", n)
    }
    callgate.say(Buffer.concat([callerTurn, silence(1000)]))
    // The agent says when it decides to stay silent.
    await until(() => stalled.length > 0, "the stall")
    expect(stalled).toEqual([3])
    expect(stream.events("mark").map((m) => m.mark.name)).toEqual(["reply-1", "reply-2"])
    expect(agent.stats).toMatchObject({ turns: 3, replies: 2, stalls: 1 })
  })

  it("sends hangup once its K-th reply has played", async () => {
    const agent = await answering({ hangupAfterTurns: 1 })
    const seen: Array<string> = []
    agent.on("mark", ({ name }) => void seen.push(`mark ${name}`))
    agent.on("action", ({ kind }) => void seen.push(kind))
    const stream = gateway.streams[0]!
    const callgate = callgateSide(stream)
    callgate.start()
    callgate.say(Buffer.concat([callerTurn, silence(1000)]))
    await stream.nth("mark")
    // Not before the reply has played: the agent acts only after it heard the mark come back.
    expect(stream.events("hangup")).toHaveLength(0)
    callgate.markPlayed("reply-1")
    expect(await stream.nth("hangup")).toEqual({ event: "hangup" })
    expect(seen).toEqual(["mark reply-1", "hangup"])
    expect(stream.messages.at(-1)).toEqual({ event: "hangup" })
  })

  it("sends transfer or error when told to", async () => {
    await answering({ transferAfterTurns: 1, transferTo: "+15557654321" })
    const callgate = callgateSide(gateway.streams[0]!)
    callgate.start()
    callgate.say(Buffer.concat([callerTurn, silence(1000)]))
    await gateway.streams[0]!.nth("mark")
    callgate.markPlayed("reply-1")
    expect(await gateway.streams[0]!.nth("transfer")).toEqual({ event: "transfer", transfer: { to: "+15557654321" } })

    const failing = await startAnsweringAgent({ url: `${gateway.url.replace("http", "ws")}/v1/agents/agent_1/environments/env_1/connect`, apiKey: KEY, errorAfterTurns: 0, errorMessage: "model down" })
    cleanup.push(() => failing.close())
    const socket = await gateway.stream(1)
    await failing.ready()
    callgateSide(socket, "ses_9").start()
    expect(await socket.nth("error")).toEqual({ event: "error", error: { message: "model down" } })
  })

  it("takes a DTMF digit as the end of a turn", async () => {
    await answering()
    const stream = gateway.streams[0]!
    const callgate = callgateSide(stream)
    callgate.start()
    callgate.dtmf("7")
    await stream.nth("mark")
    expect(Buffer.concat(agentMedia(stream)).equals(reply)).toBe(true)
  })

  it("streams its reply at 20 ms per frame, stamped when asked", async () => {
    await answering({ stampFrames: true })
    const stream = gateway.streams[0]!
    const clock = manualFrameClock(stream, cleanup)
    const callgate = callgateSide(stream)
    callgate.start()
    callgate.say(Buffer.concat([callerTurn, silence(1000)]))
    const first = await stream.nth("media")
    const startedAt = clock.now()
    await clock.stepUntil(6)
    await stream.nth("mark")
    // One frame per 20 ms of the frame clock: frame n arrived only once the clock reached n * 20 ms
    // (a burst would have sent them all at the first tick).
    expect(clock.at.map((at) => at - startedAt)).toEqual([0, 20, 40, 60, 80, 100])
    const stamps = agentMedia(stream).map((frame) => readStamp(frame))
    expect(stamps.map((stamp) => stamp?.seq)).toEqual([1, 2, 3, 4, 5, 6])
    expect(new Set(stamps.map((stamp) => stamp?.callId)).size).toBe(1)
    expect(first.streamSid).toBe(callgate.streamSid)
  })

  const envelope = (code: string, message: string) => JSON.stringify({ error: { code, message, details: [] } })

  it.each([
    [401, "UNAUTHORIZED", "A valid API key is required: send Authorization: Bearer <key>."],
    [403, "FORBIDDEN", "This API key may not act for this agent."],
    [404, "NOT_FOUND", "Environment env_9 not found."]
  ])("stops on %i from /connect and reports callgate's own message", async (status, code, message) => {
    gateway = await startFakeGateway({ refuseUpgrade: () => ({ status, body: envelope(code, message) }) })
    cleanup.push(() => gateway.close())
    const agent = await startAnsweringAgent({ gatewayUrl: gateway.url, agentId: "agent_1", environmentId: "env_1", apiKey: "some-key", capacity: 2, reconnectDelayMs: 1 })
    cleanup.push(() => agent.close())
    const retried: Array<string> = []
    agent.on("connectError", (text) => retried.push(text))
    const [refusal] = await new Promise<[any]>((resolve) => agent.once("fatal", (...args) => resolve(args as [any])))
    expect(refusal).toEqual({ status, code, message })
    // Both sockets were refused once and the pool is closed: nothing is left to retry.
    await until(() => gateway.upgrades.length >= 2, "both sockets' attempts")
    await until(() => agent.pool!.openSockets === 0, "the pool to close")
    expect(agent.pool!.isStopped).toBe(true)
    expect(retried).toEqual([])
  })

  it("backs off and keeps trying on 5xx and network errors", async () => {
    let refuse = true
    gateway = await startFakeGateway({
      refuseUpgrade: () => (refuse ? { status: 503, body: envelope("UNAVAILABLE", "callgate is shutting down: connect to another instance.") } : undefined)
    })
    cleanup.push(() => gateway.close())
    const agent = await startAnsweringAgent({ gatewayUrl: gateway.url, agentId: "agent_1", environmentId: "env_1", apiKey: KEY, reconnectDelayMs: 1 })
    cleanup.push(() => agent.close())
    const errors: Array<string> = []
    agent.on("connectError", (message) => errors.push(message))
    await until(() => errors.length >= 3, "three failed attempts")
    expect(errors[0]).toBe("503 UNAVAILABLE: callgate is shutting down: connect to another instance.")
    refuse = false
    await agent.ready(60_000)
    expect(gateway.streams).toHaveLength(1)
  })

  it("retries a refused TCP connection (the gateway not up yet)", async () => {
    const agent = await startAnsweringAgent({ url: "ws://127.0.0.1:1/v1/agents/a/environments/e/connect", apiKey: KEY, reconnectDelayMs: 1 })
    cleanup.push(() => agent.close())
    const errors: Array<string> = []
    agent.on("connectError", (message) => errors.push(message))
    await until(() => errors.length >= 2, "a second attempt")
    expect(errors[0]).toContain("ECONNREFUSED")
  })

  it("serves dial-out calls on its own WebSocket server", async () => {
    const agent = await startAnsweringAgent({ dialOut: { port: 0 }, reply, responseLatencyMs: 10 })
    cleanup.push(() => agent.close())
    expect(agent.server?.url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+\/$/)
    const socket = new WebSocket(agent.server!.url)
    const messages: Array<any> = []
    socket.on("message", (data) => messages.push(JSON.parse(data.toString())))
    await new Promise((resolve) => socket.once("open", resolve))
    const dialect = twilioDialect({ streamSid: "MZout", accountSid: "AC", callSid: "CA", customParameters: { sessionId: "ses_out" } })
    socket.send(dialect.connected())
    socket.send(dialect.start(1))
    framesOf(Buffer.concat([callerTurn, silence(1000)])).forEach((frame, i) => socket.send(dialect.media(i + 2, i + 1, i * 20, frame.toString("base64"))))
    await new Promise<void>((resolve) => {
      const check = () => (messages.some((m) => m.event === "mark") ? resolve() : setTimeout(check, 10))
      check()
    })
    expect(messages.filter((m) => m.event === "media")).toHaveLength(6)
    expect(messages.at(-1)).toEqual({ event: "mark", streamSid: "MZout", mark: { name: "reply-1" } })
    socket.close()
  })
})

describe("silent agent", () => {
  const cleanup: Array<() => Promise<void>> = []
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step()
  })

  const setup = async (stream: "none" | "silence" | "noise") => {
    const gateway = await startFakeGateway()
    cleanup.push(() => gateway.close())
    const agent = await startSilentAgent({ url: `${gateway.url.replace("http", "ws")}/connect`, apiKey: KEY, stream })
    cleanup.push(() => agent.close())
    await agent.ready()
    const socket = gateway.streams[0]!
    const clock = manualFrameClock(socket, cleanup)
    let heard = 0
    agent.on("callerMedia", () => void heard++)
    const callgate = callgateSide(socket)
    // The agent's frame clock cannot start before the call does: frame n is due n * 20 ms after this.
    const startedAt = clock.now()
    callgate.start()
    const caller = framesOf(Buffer.concat([callerTurn, silence(1000)]))
    callgate.say(Buffer.concat([callerTurn, silence(1000)]))
    // The agent has heard the whole turn and the second of silence after it.
    await until(() => heard === caller.length, "the agent to hear the caller")
    return { agent, socket, callgate, clock, startedAt }
  }

  it("takes the call and never answers", async () => {
    const { agent, socket, callgate } = await setup("none")
    expect(agent.stats.calls).toBe(1)
    expect(socket.request.headers.authorization).toBe(`Bearer ${KEY}`)
    // Until the call ends (everything the agent sent before has arrived by then), it sent nothing.
    callgate.stop()
    await until(() => agent.stats.callsEnded === 1 && socket.closed !== undefined, "the end of the call")
    expect(socket.messages).toHaveLength(0)
  })

  it("can stream comfort noise or silence, which is never voiced", async () => {
    for (const kind of ["noise", "silence"] as const) {
      const { socket, clock, startedAt } = await setup(kind)
      // It keeps streaming past its one-second loop (50 frames), at the pace of the audio: frame n
      // arrives once the frame clock reached n * 20 ms, across the loop's seam too. Frame 0 is due
      // at the start: it is awaited before the clock moves, or a busy machine delivers it after.
      await until(() => clock.at.length > 0, "the agent's first frame")
      await clock.stepUntil(60)
      expect(clock.at.slice(0, 60).map((at) => at - startedAt)).toEqual(Array.from({ length: 60 }, (_, n) => n * 20))
      const frames = agentMedia(socket)
      expect(frames.some((frame) => isVoicedFrame(frame))).toBe(false)
      expect(socket.events("mark")).toHaveLength(0)
      if (kind === "noise") expect(frames.some((frame) => frame.some((byte) => byte !== 0xff))).toBe(true)
    }
  })
})

describe("example agent CLIs", () => {
  let gateway: FakeGateway | undefined
  const children: Array<ChildProcess> = []
  afterEach(async () => {
    for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
    await gateway?.close()
    gateway = undefined
  })

  const run = (script: string, args: Array<string>) => {
    const child = spawn(process.execPath, ["--import", "tsx", `examples/agents/${script}`, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, CALLGATE_API_KEY: undefined } })
    children.push(child)
    const output = { stdout: "", stderr: "" }
    child.stdout!.on("data", (chunk) => (output.stdout += chunk))
    child.stderr!.on("data", (chunk) => (output.stderr += chunk))
    const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)))
    return { child, output, exited }
  }

  it.each(["answering-agent.ts", "silent-agent.ts"])("%s prints callgate's refusal and exits 1 on a wrong key, after one attempt per socket", async (script) => {
    gateway = await startFakeGateway({
      refuseUpgrade: () => ({
        status: 401,
        body: JSON.stringify({ error: { code: "UNAUTHORIZED", message: "A valid API key is required: send Authorization: Bearer <key>.", details: [] } })
      })
    })
    const agent = run(script, ["--gateway", gateway.url, "--agent", "agent_1", "--environment", "env_1", "--key", "wrong", "--capacity", "2"])
    expect(await agent.exited).toBe(1)
    expect(agent.output.stderr).toContain("callgate refused the connection: 401 UNAUTHORIZED: A valid API key is required: send Authorization: Bearer <key>.")
    expect(agent.output.stderr).toContain("Check --key")
    expect(gateway.upgrades.length).toBeLessThanOrEqual(2)
  })

  it("refuses to start a dial-in agent with an empty or missing key", async () => {
    gateway = await startFakeGateway()
    const empty = run("answering-agent.ts", ["--gateway", gateway.url, "--agent", "agent_1", "--environment", "env_1", "--key", ""])
    expect(await empty.exited).toBe(2)
    expect(empty.output.stderr).toContain("--key is empty")
    const missing = run("silent-agent.ts", ["--gateway", gateway.url, "--agent", "agent_1", "--environment", "env_1"])
    expect(await missing.exited).toBe(2)
    expect(missing.output.stderr).toContain("a dial-in agent needs an API key")
    expect(gateway.upgrades).toHaveLength(0)
  })

  it("names the callSid and accountSid of each call it takes", async () => {
    gateway = await startFakeGateway()
    const agent = run("answering-agent.ts", ["--gateway", gateway.url, "--agent", "agent_1", "--environment", "env_1", "--key", KEY])
    const stream = await gateway.stream()
    callgateSide(stream, "ses_42").start()
    await until(() => agent.output.stdout.includes("callSid"), "the call's log line")
    expect(agent.output.stdout).toContain("call ses_42 started (twilio, inbound, from +15550001 to +15550002; callSid CA0, accountSid AC0)")
    agent.child.kill("SIGTERM")
    expect(await agent.exited).toBe(0)
  })
})
