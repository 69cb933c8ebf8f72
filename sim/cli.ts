#!/usr/bin/env node
/**
 * callgate-sim: places one simulated phone call on a running callgate, as Twilio or Telnyx would,
 * and prints what happened. See docs/simulator.md.
 */
import { performance } from "node:perf_hooks"
import { parseArgs } from "node:util"
import { loadAudio } from "./AudioSource.js"
import { durationMs, FRAME_BYTES } from "./Mulaw.js"
import { twilioSid } from "./CallEntry.js"
import { type SimCall, SimError, redactUrl } from "./SimCall.js"
import { placeTelnyxTexmlCall } from "./TelnyxCall.js"
import { isSimStreamCodec, SIM_STREAM_CODECS } from "./StreamCodec.js"
import { placeTwilioCall } from "./TwilioCall.js"
import { runCarrierCli } from "./carrierCli.js"

const USAGE = `Usage: callgate-sim --agent ID --environment ID [options]
       callgate-sim carrier [options]     a local carrier for outbound calls (carrier --help)

Places one simulated inbound call on a running callgate and prints what happened.

Options:
  --gateway URL          callgate's base URL (default http://127.0.0.1:8080)
  --provider NAME        twilio (voice webhook + Media Streams) or telnyx (TeXML); default twilio
  --agent ID             agent id (required)
  --environment ID       environment id (required)
  --audio SPEC           what the caller says each turn: speech[:ms], silence[:ms], noise[:ms],
                         a .wav file (mu-law 8 kHz, or 16-bit PCM 8/16 kHz mono) or a raw .ulaw file;
                         default speech
  --turns N              caller turns, each waiting for the agent to answer (default 2)
  --dtmf DIGITS          keypad digits sent after the turns
  --duration SECONDS     hang up after this long whatever happens (default 120)
  --answer-timeout SEC   how long each turn waits for the agent to answer (default 10)
  --pause MS             silence between turns (default 500)
  --from E164, --to E164 caller and called numbers
  --auth-token TOKEN     Twilio auth token, when the gateway checks X-Twilio-Signature
                         (default: the TWILIO_AUTH_TOKEN environment variable)
  --public-url URL       the gateway's PUBLIC_URL, for signatures (default: --gateway)
  --codec CODEC          telnyx only: the codec the call streams both ways: PCMU, PCMA,
                         L16;rate=8000, L16;rate=16000 (quote it) or G722; default: what the answer's
                         <Stream> asks for (the environment's telnyxStreamCodec), as Telnyx does
  --stream-via WHERE     twiml: connect to the stream URL the answer gives (default);
                         gateway: the same path and query on the --gateway host
  --follow-redirect      when the gateway ends the stream (or dies), go on to the answer's
                         <Redirect> as the carrier does, and print what it answers
  --key KEY              an API key for the agent (admin or scoped; default the CALLGATE_API_KEY
                         environment variable): reads the call's session afterwards (its id,
                         status, turns as the gateway measured them, the rescue and why)
  --expect OUTCOME       answered (default), rescued or refused: the exit status is 0 only when
                         the call had this outcome
  --wait-for-agent       before calling, wait until the environment has an idle dial-in agent
                         (needs --key); --wait-timeout SEC bounds the wait (default 60)
  --verbose              print every frame received from the gateway
  --help                 this text

Outcomes: answered (every caller turn answered, no rescue), rescued (the gateway ran the error
fallback: why and what it did are printed), refused (the entry webhook did not connect a stream:
what the carrier was told is printed), failed (anything else: an unanswered turn, a broken stream).

Exit status: 0 when the outcome is the --expect one, 1 otherwise, 2 for bad usage.`

const fail = (message: string, code = 2): never => {
  process.stderr.write(`callgate-sim: ${message}\n`)
  process.exit(code)
}

const parse = () => {
  try {
    return parseArgs({
      options: {
        gateway: { type: "string", default: "http://127.0.0.1:8080" },
        provider: { type: "string", default: "twilio" },
        agent: { type: "string" },
        environment: { type: "string" },
        audio: { type: "string", default: "speech" },
        turns: { type: "string", default: "2" },
        dtmf: { type: "string" },
        duration: { type: "string", default: "120" },
        "answer-timeout": { type: "string", default: "10" },
        pause: { type: "string", default: "500" },
        from: { type: "string" },
        to: { type: "string" },
        "auth-token": { type: "string" },
        "public-url": { type: "string" },
        codec: { type: "string" },
        "stream-via": { type: "string", default: "twiml" },
        "follow-redirect": { type: "boolean", default: false },
        key: { type: "string" },
        expect: { type: "string", default: "answered" },
        "wait-for-agent": { type: "boolean", default: false },
        "wait-timeout": { type: "string", default: "60" },
        verbose: { type: "boolean", default: false },
        help: { type: "boolean", default: false }
      },
      strict: true
    }).values
  } catch (error) {
    return fail(`${(error as Error).message}\n\n${USAGE}`)
  }
}

const number = (name: string, text: string, min: number): number => {
  const value = Number(text)
  if (!Number.isFinite(value) || value < min) fail(`--${name} must be a number >= ${min}, got "${text}"`)
  return value
}

const main = async () => {
  const args = parse()
  if (args.help) {
    process.stdout.write(`${USAGE}\n`)
    return 0
  }
  if (!args.agent || !args.environment) return fail(`--agent and --environment are required\n\n${USAGE}`)
  if (args.provider !== "twilio" && args.provider !== "telnyx") return fail(`--provider must be twilio or telnyx, got "${args.provider}"`)
  if (args["stream-via"] !== "twiml" && args["stream-via"] !== "gateway") return fail(`--stream-via must be twiml or gateway`)
  const codec = args.codec
  if (codec !== undefined && args.provider !== "telnyx") return fail("--codec is for --provider telnyx (Twilio streams are always 8 kHz mu-law)")
  if (codec !== undefined && !isSimStreamCodec(codec)) return fail(`--codec takes ${SIM_STREAM_CODECS.join(", ")}; got "${codec}"`)
  if (args.dtmf !== undefined && !/^[0-9*#A-D]+$/.test(args.dtmf)) return fail(`--dtmf takes the keys 0-9 * # A-D, got "${args.dtmf}"`)
  const turns = number("turns", args.turns, 0)
  const durationSeconds = number("duration", args.duration, 1)
  const answerTimeoutMs = number("answer-timeout", args["answer-timeout"], 0) * 1000
  const pauseMs = number("pause", args.pause, 0)
  let audio: Buffer
  try {
    audio = loadAudio(args.audio)
  } catch (error) {
    return fail((error as Error).message)
  }

  const expected = args.expect
  if (expected !== "answered" && expected !== "rescued" && expected !== "refused") {
    return fail(`--expect must be answered, rescued or refused, got "${expected}"`)
  }
  const key = args.key ?? process.env.CALLGATE_API_KEY
  if (args["wait-for-agent"] && !key) return fail("--wait-for-agent needs --key (or CALLGATE_API_KEY)")
  const waitTimeoutMs = number("wait-timeout", args["wait-timeout"], 0) * 1000
  const api = key ? apiClient(args.gateway, key, args.agent, args.environment) : undefined

  const startedAt = performance.now()
  const log = (message: string) => process.stdout.write(`[${((performance.now() - startedAt) / 1000).toFixed(3).padStart(7)}s] ${message}\n`)
  const finish = (outcome: Outcome, detail: string) => {
    log(`outcome: ${outcome}${detail ? ` (${detail})` : ""}`)
    if (outcome === expected) return 0
    log(`expected ${expected}: exit status 1`)
    return 1
  }

  if (args["wait-for-agent"]) {
    log(`waiting for an idle agent in environment ${args.environment}`)
    const idle = await api!.waitForIdleAgent(waitTimeoutMs)
    if (typeof idle === "string") {
      log(idle)
      return finish("failed", "no call placed")
    }
    log(`${idle} idle agent${idle === 1 ? "" : "s"} ready`)
  }

  log(`placing a ${args.provider} call on ${args.gateway} (agent ${args.agent}, environment ${args.environment})`)
  const callSid = twilioSid("CA")
  let call: SimCall
  try {
    const common = {
      gatewayUrl: args.gateway,
      agentId: args.agent,
      environmentId: args.environment,
      callSid,
      followRedirect: args["follow-redirect"],
      ...(args.from ? { from: args.from } : {}),
      ...(args.to ? { to: args.to } : {})
    }
    call =
      args.provider === "twilio"
        ? await placeTwilioCall({
            ...common,
            authToken: args["auth-token"] ?? process.env.TWILIO_AUTH_TOKEN,
            publicUrl: args["public-url"],
            streamVia: args["stream-via"] === "gateway" ? "gateway" : "twiml"
          })
        : await placeTelnyxTexmlCall({ ...common, streamVia: args["stream-via"] === "gateway" ? "gateway" : "texml", ...(codec !== undefined ? { codec } : {}) })
  } catch (error) {
    if (error instanceof SimError && (error.kind === "markup" || error.kind === "webhook") && error.body !== undefined) {
      // The gateway answered without a stream: what a carrier would do with it is the answer.
      const told = spokenText(error.body)
      log(`refused: the entry webhook answered HTTP ${error.status ?? 200} without a stream`)
      log(`the carrier was told: ${told.length > 0 ? told.map((text) => `"${text}"`).join(", ") + ", then hang up" : error.body.slice(0, 300)}`)
      return finish("refused", told.join(" ") || `HTTP ${error.status ?? 200}`)
    }
    log(error instanceof SimError ? error.message : `the call failed: ${(error as Error).message}`)
    return finish("failed", "no stream")
  }
  const entry = call.entry!
  log(`webhook answered HTTP ${entry.status}: stream ${redactUrl(entry.stream.url)}, parameters ${Object.keys(entry.stream.parameters).join(", ") || "(none)"}`)
  log(`stream open (${call.provider} ${call.streamId}, ${call.codec}): sent connected and start; media flows every 20 ms`)

  call.on("agentAnswer", ({ latencyMs }) => log(`agent began answering, ${Math.round(latencyMs)} ms after the caller's last voiced frame`))
  call.on("mark", ({ name }) => log(`gateway sent mark "${name}"`))
  call.on("markEchoed", ({ name, cleared }) => log(`echoed mark "${name}"${cleared ? " (cleared)" : " (played)"}`))
  call.on("clear", ({ droppedMs }) => log(`gateway sent clear: dropped ${Math.round(droppedMs)} ms of queued agent audio`))
  call.on("protocolError", (message) => log(`PROTOCOL: ${message}`))
  if (args.verbose) {
    call.on("agentMedia", ({ payload, voiced }) => log(`agent media: ${payload.length} bytes${voiced ? ", voiced" : ""}`))
  }
  const cap = setTimeout(() => {
    log(`--duration ${durationSeconds}s reached: hanging up`)
    void call.hangup("duration reached")
  }, durationSeconds * 1000)

  const latencies: Array<number> = []
  for (let turn = 1; turn <= turns && call.isOpen; turn++) {
    if (turn > 1) await call.pause(pauseMs)
    log(`turn ${turn}: caller speaks (${durationMs(audio)} ms)`)
    const result = await call.turn(audio, { answerTimeoutMs })
    if (result.answer.answered) {
      latencies.push(result.answer.latencyMs)
      log(
        `turn ${turn}: sent ${result.framesSent} frames; agent answered after ${Math.round(result.answer.latencyMs)} ms ` +
          `and sent ${result.agentMessages} media frames (${Math.round(result.agentBytes / FRAME_BYTES) * 20} ms of audio)`
      )
    } else {
      log(`turn ${turn}: sent ${result.framesSent} frames; ${result.answer.reason === "closed" ? "the call ended" : `no answer within ${answerTimeoutMs / 1000}s`}`)
    }
  }
  if (args.dtmf && call.isOpen) {
    log(`sending DTMF ${args.dtmf}`)
    await call.sendDtmf(args.dtmf)
    const answer = await call.waitForAgentAnswer({ timeoutMs: answerTimeoutMs })
    log(answer.answered ? `agent answered the digits after ${Math.round(answer.latencyMs)} ms` : `no answer to the digits`)
    if (answer.answered) await call.waitForAgentQuiet()
  }
  if (call.isOpen) log("caller hangs up: sending stop")
  const closed = await call.hangup()
  clearTimeout(cap)
  log(`stream closed by the ${closed.by}: code ${closed.code}${closed.reason ? ` (${closed.reason})` : ""}`)
  let redirectRescue: string | undefined
  if (call.redirected !== undefined) {
    try {
      const answer = await call.redirected
      if (answer !== undefined) {
        const verbs = [...answer.markup.matchAll(/<(Dial|Say|Play|Hangup|Redirect|Connect|Reject|Enqueue|Gather|Pause)\b[^>]*>([^<]*)/g)]
          .map((match) => (match[2] ? `<${match[1]}>${match[2]}` : `<${match[1]}>`))
          .join(" ")
        log(`the carrier followed the <Redirect> ${redactUrl(answer.url)}: HTTP ${answer.status}, ${verbs || answer.markup.slice(0, 200)}`)
        if (answer.status === 200 && verbs !== "<Hangup>") redirectRescue = verbs
      }
    } catch (error) {
      log((error as Error).message)
    }
  } else if (args["follow-redirect"] && closed.by === "gateway") {
    log("the answer had no <Redirect> to follow")
  }
  const s = call.stats
  log(
    `summary: sent ${s.framesSent} media frames (${s.voicedFramesSent} voiced), ${s.dtmfSent} DTMF; received ${s.agentMessages} media frames ` +
      `(${s.agentVoicedMessages} voiced), ${s.marksReceived} marks (${s.marksEchoed} echoed), ${s.clears} clears; ` +
      `response latency ${latencies.length > 0 ? latencies.map((ms) => `${Math.round(ms)} ms`).join(", ") : "n/a"}` +
      (s.protocolErrors > 0 ? `; ${s.protocolErrors} PROTOCOL ERRORS` : "")
  )
  const normal = closed.by === "simulator" ? closed.code === 1000 : closed.code === 1000 || closed.code === 1005

  let session: SessionSummary | undefined
  if (api) {
    const found = await api.endedSession(callSid, 15_000)
    if (typeof found === "string") log(found)
    else {
      session = found
      log(
        `session ${found.id}: ${found.status}${found.endReason ? ` (${found.endReason})` : ""}; gateway-measured latency ` +
          `${found.turns.length > 0 ? found.turns.map((t) => (t.latencyMs === null ? "no answer" : `${Math.round(t.latencyMs)} ms`)).join(", ") : "n/a"}` +
          (found.turns.some((t) => t.latencyMs !== null)
            ? " (measured from the caller's last voiced frame as the gateway heard it, so it can differ from the simulator's)"
            : "")
      )
    }
  } else {
    log("session: pass --key (or set CALLGATE_API_KEY) to read the session's id, its turns and any rescue")
  }

  if (session?.fallback) {
    const f = session.fallback
    log(`rescued: ${f.trigger} (${f.errorMessage}); error fallback ${f.type}: ${f.outcome}${f.detail ? ` (${f.detail})` : ""}`)
    return finish("rescued", `${f.trigger}, ${f.outcome}`)
  }
  if (session === undefined && redirectRescue !== undefined) return finish("rescued", `the <Redirect> answered ${redirectRescue}`)
  if (session === undefined && closed.by === "gateway" && latencies.length < turns) {
    // Without the session: the gateway ended the call before the caller was done.
    return finish("failed", `the gateway ended the call after ${latencies.length} of ${turns} turns answered; pass --key to learn why`)
  }
  if (latencies.length === turns && normal && s.protocolErrors === 0) return finish("answered", `${turns} of ${turns} turns answered`)
  return finish("failed", `${latencies.length} of ${turns} turns answered${normal ? "" : `, stream closed with code ${closed.code}`}`)
}

type Outcome = "answered" | "rescued" | "refused" | "failed"

/** The texts of the <Say> verbs of a TwiML/TeXML answer: what the caller hears. */
const spokenText = (markup: string): Array<string> =>
  [...markup.matchAll(/<Say\b[^>]*>([\s\S]*?)<\/Say>/g)].map((match) =>
    match[1]!.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&apos;/g, "'").replace(/&amp;/g, "&").trim()
  )

interface SessionSummary {
  readonly id: string
  readonly callId: string
  readonly status: string
  readonly endReason: string | null
  readonly turns: ReadonlyArray<{ readonly latencyMs: number | null }>
  readonly fallback: {
    readonly trigger: string
    readonly errorMessage: string
    readonly type: string
    readonly outcome: string
    readonly detail: string | null
  } | null
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The few /v1 reads the simulator makes with --key. */
const apiClient = (gateway: string, key: string, agentId: string, environmentId: string) => {
  const base = gateway.replace(/\/+$/, "")
  const get = async (path: string): Promise<{ status: number; body: any }> => {
    const response = await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${key}` }, signal: AbortSignal.timeout(10_000) })
    return { status: response.status, body: await response.json().catch(() => undefined) }
  }
  const agent = encodeURIComponent(agentId)
  const environment = encodeURIComponent(environmentId)
  return {
    /** The number of idle agents once there is one, or why it gave up. */
    waitForIdleAgent: async (timeoutMs: number): Promise<number | string> => {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        try {
          const { status, body } = await get(`/v1/agents/${agent}/environments/${environment}/agents`)
          if (status === 200 && body.data.idle > 0) return body.data.idle as number
          if (status !== 200) return `cannot read the environment's agents: HTTP ${status}${body?.error ? `: ${body.error.message}` : ""}`
        } catch {
          // the gateway is not up yet: keep waiting
        }
        if (Date.now() > deadline) return `no idle agent within ${timeoutMs / 1000} s`
        await sleep(200)
      }
    },
    /** The session of the call once the gateway has recorded its end, or why it could not be read. */
    endedSession: async (callId: string, timeoutMs: number): Promise<SessionSummary | string> => {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const { status, body } = await get(`/v1/agents/${agent}/sessions?environmentId=${environment}&limit=100`)
        if (status !== 200) return `cannot read the sessions: HTTP ${status}${body?.error ? `: ${body.error.message}` : ""}`
        const session = (body.data.sessions as Array<SessionSummary>).find((candidate) => candidate.callId === callId)
        if (session !== undefined && session.status !== "active") return session
        if (Date.now() > deadline) return session === undefined ? "no session was recorded for this call" : `session ${session.id} is still active`
        await sleep(100)
      }
    }
  }
}

;(process.argv[2] === "carrier" ? runCarrierCli(process.argv.slice(3)) : main()).then(
  (code) => process.exit(code),
  (error) => fail(`unexpected failure: ${(error as Error).stack ?? error}`, 1)
)
