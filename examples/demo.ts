/**
 * `npm run demo`: a one-command tour of what callgate does, on loopback, in about 20 seconds.
 *
 * It starts callgate (a child process, embedded store), a fake Twilio REST API, an HTTPS receiver
 * for both webhook kinds and the example answering agent; configures an environment through /v1;
 * places one simulated Twilio call whose caller speaks three turns. The agent answers two and
 * stalls on the third: callgate's response timer expires, the no-response breaker trips, the
 * error fallback webhook answers TwiML, callgate applies it to the call through Twilio's REST API,
 * and a signed session.ended arrives. Everything is printed as it happens; the exit status is 0
 * when every step happened, 1 (with the reason) when one did not.
 *
 * See docs/simulator.md ("Demo").
 */
import { randomBytes } from "node:crypto"
import { durationMs } from "../sim/Mulaw.js"
import type { SimCall } from "../sim/SimCall.js"
import { placeTwilioCall } from "../sim/TwilioCall.js"
import type { CallStart } from "./agents/agent-runtime.js"
import { startAnsweringAgent } from "./agents/answering-agent.js"
import type { CallgateApi, Session, Turn } from "./demo/callgate-api.js"
import { Narrator, seconds, shortId, table } from "./demo/narrator.js"
import {
  AGENT_ID,
  AGENT_NUMBER,
  AGENT_THINKING_MS,
  ANSWERED_TURNS,
  CALLER_NUMBER,
  CALLER_TURNS,
  DEMO_DEADLINE_MS,
  FALLBACK_TWIML,
  PERSON_NUMBER,
  REPLY,
  RESPONSE_TIMEOUT_SECONDS
} from "./demo/scenario.js"
import { configure, type Services, type Stage, startServices } from "./demo/setup.js"
import { DemoFailure, Inbox, Teardown, withTimeout } from "./demo/steps.js"

/** callgate's own record of turn `index` once it has the agent's answer (turns are stored as the call goes). */
const recordedTurn = async (api: CallgateApi, sessionId: string, index: number): Promise<Turn> => {
  const deadline = Date.now() + 3000
  for (;;) {
    const turn = (await api.session(AGENT_ID, sessionId)).turns.find((t) => t.index === index)
    if (turn !== undefined && turn.latencyMs !== null) return turn
    if (Date.now() > deadline) throw new DemoFailure(`callgate recorded no response latency for turn ${index}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/** Two answered turns; returns the latencies the caller measured. */
const answeredTurns = async ({ say }: Stage, api: CallgateApi, call: SimCall, sessionId: string) => {
  const heard: Array<number> = []
  // The agent sends a mark after each reply, and the caller's side echoes it once that audio has
  // played: the reply is over by order, not after a quiet gap (which a busy machine can open mid-reply).
  // callgate's own playout marks (`callgate:played:<turn>`, after the first voiced frame) are not the agent's.
  let echoed = 0
  call.on("markEchoed", ({ name }) => {
    if (!name.startsWith("callgate:")) echoed++
  })
  const replyPlayed = (count: number) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (echoed >= count) {
          call.off("markEchoed", check)
          call.off("closed", closed)
          resolve()
        }
      }
      const closed = () => reject(new DemoFailure("the call ended before the agent's reply had played"))
      call.on("markEchoed", check)
      call.once("closed", closed)
      check()
    })
  for (let index = 1; index <= ANSWERED_TURNS; index++) {
    const audio = CALLER_TURNS[index - 1]!
    say.say("caller", `turn ${index}: speaks for ${seconds(durationMs(audio))} (recorded speech), then waits`)
    await call.play(audio)
    const answer = await call.waitForAgentAnswer({ timeoutMs: 10_000 })
    if (!answer.answered) throw new DemoFailure(`turn ${index}: the agent did not answer (${answer.reason})`)
    heard.push(answer.latencyMs)
    say.say("caller", `turn ${index}: hears the agent ${Math.round(answer.latencyMs)} ms after its last voiced frame`)
    const turn = await recordedTurn(api, sessionId, index)
    say.say("callgate", `turn ${index} response latency: ${turn.latencyMs} ms (turns[${index - 1}] of GET /v1/agents/${AGENT_ID}/sessions/${sessionId})`)
    await replyPlayed(index)
  }
  return heard
}

/** Turn three: the agent stalls, and everything the breaker sets off, printed as it arrives. */
const stalledTurn = async ({ say }: Stage, services: Services, call: SimCall, callSid: string) => {
  const { gateway, receiver, twilio } = services
  const audio = CALLER_TURNS[ANSWERED_TURNS]!
  say.say("caller", `turn ${ANSWERED_TURNS + 1}: speaks for ${seconds(durationMs(audio))} (recorded speech), then waits`)
  const within = 20_000
  const steps = [
    gateway.logs.next((log) => log.msg === "no-response breaker tripped", within, "the breaker to trip").then((log) =>
      say.say(
        "callgate",
        `breaker tripped: no answer within ${RESPONSE_TIMEOUT_SECONDS} s, occurrence ${log.count} of threshold ${log.threshold} in the window`
      )
    ),
    receiver.received.next((r) => r.role === "fallback", within, "the error fallback webhook request").then((request) => {
      const body = JSON.parse(request.rawBody.toString("utf8")) as Record<string, string>
      const error = new URL(request.url, "https://receiver").searchParams.get("error") ?? ""
      say.say(
        "receiver",
        `fallback request: POST ${request.url}`,
        `error               ${error}`,
        `body                CallSid ${shortId(body.CallSid ?? "")}, From ${body.From}, To ${body.To}, SessionId ${body.SessionId}`,
        `signature verified: ${request.verified ? "yes" : "NO"}`,
        `answered            ${request.status}${request.verified ? ", TwiML: " + FALLBACK_TWIML : ""}`
      )
      if (!request.verified) throw new DemoFailure("the fallback request's signature did not verify")
    }),
    twilio.updates.next((u) => u.callSid === callSid, within, "callgate's call update at the fake Twilio API").then((update) => {
      if (update.form.Twiml === undefined) throw new DemoFailure(`callgate updated the call without TwiML: ${JSON.stringify(update.form)}`)
      say.say(
        "twilio",
        `call update POST /2010-04-01/Accounts/${shortId(services.accountSid)}/Calls/${shortId(callSid)}.json`,
        `TwiML applied: ${update.form.Twiml}`,
        `(on a real call the caller now hears the apology and is connected to ${PERSON_NUMBER})`
      )
    }),
    gateway.logs.next((log) => log.msg === "error fallback ran", within, "the error fallback to finish").then((log) =>
      say.say("callgate", `error fallback ran: type ${log.type}, outcome ${log.outcome}`)
    ),
    withTimeout(call.closed, within, "callgate to close the media stream").then((closed) =>
      say.say("caller", `media stream closed by ${closed.by === "gateway" ? "callgate" : "the caller"} (code ${closed.code}): Twilio carries on with the TwiML`)
    ),
    receiver.received.next((r) => r.role === "event", within, "the session.ended webhook").then((request) => {
      say.say("receiver", `session.ended received: signature verified: ${request.verified ? "yes" : "NO"}`)
      say.block(JSON.stringify(JSON.parse(request.rawBody.toString("utf8")), null, 2).split("\n"))
      if (!request.verified) throw new DemoFailure("the session.ended signature did not verify")
    })
  ]
  await call.play(audio)
  await Promise.all(steps)
}

/** callgate's record of the call, read back through /v1, beside what the caller measured. */
const summary = async ({ say }: Stage, api: CallgateApi, sessionId: string, heard: ReadonlyArray<number>) => {
  const session: Session = await api.session(AGENT_ID, sessionId)
  const at = (iso: string | null | undefined) => (iso ? `+${((Date.parse(iso) - say.startedAt) / 1000).toFixed(3)}s` : "-")
  say.section(`What callgate recorded: GET /v1/agents/${AGENT_ID}/sessions/${sessionId}`)
  say.plain(
    `status ${session.status}, end reason ${session.endReason}, from ${at(session.createdAt)} to ${at(session.endedAt)}`,
    "",
    ...table([
      ["turn", "caller stopped", "agent began", "latency (callgate)", "latency (simulator)", "timer expiries"],
      ...session.turns.map((turn) => [
        String(turn.index),
        at(turn.callerEndedAt),
        at(turn.agentRespondedAt),
        turn.latencyMs === null ? "no answer" : `${turn.latencyMs} ms`,
        heard[turn.index - 1] === undefined ? "-" : `${Math.round(heard[turn.index - 1]!)} ms`,
        String(turn.timeoutOccurrences)
      ])
    ])
  )
  const fallback = session.fallback
  if (fallback === null) throw new DemoFailure("the session has no fallback record")
  const tookMs = fallback.carrierRequestAt ? Date.parse(fallback.carrierRequestAt) - Date.parse(fallback.startedAt) : undefined
  say.plain(
    "",
    `fallback: trigger ${fallback.trigger}, type ${fallback.type}, webhook HTTP ${fallback.webhookStatus}, outcome ${fallback.outcome}` +
      (tookMs === undefined ? "" : `; callgate started the Twilio call update ${tookMs} ms after the trip`)
  )
  const metrics = (await api.metrics())
    .split("\n")
    .filter((line) => /^callgate_(breaker_trips_total|fallbacks_total|sessions_ended_total)\{/.test(line))
  say.plain("", "from /metrics:", ...metrics.map((line) => `  ${line}`), "")
  const answered = session.turns.filter((turn) => turn.latencyMs !== null).length
  if (answered !== ANSWERED_TURNS || session.status !== "failed" || fallback.outcome !== "markup_applied") {
    throw new DemoFailure(`unexpected record: ${answered} answered turns, status ${session.status}, fallback ${fallback.outcome}`)
  }
}

const tour = async (stage: Stage) => {
  const { say, teardown } = stage
  say.plain(
    "callgate demo: one Twilio call; the agent answers two turns, then stalls.",
    "callgate times each turn, trips the no-response breaker, runs the webhook error fallback,",
    "applies its TwiML to the call, and sends a signed session.ended.",
    ""
  )
  const services = await startServices(stage)
  const { gateway, api, adminKey, accountSid, authToken } = services
  const crashed = gateway.exited.then((exit) => {
    throw new DemoFailure(`callgate exited unexpectedly (code ${exit.code}${exit.signal ? `, ${exit.signal}` : ""})`)
  })
  crashed.catch(() => {})
  const run = async () => {
    const environmentId = await configure(stage, services)

    const calls = new Inbox<CallStart>()
    const agent = await startAnsweringAgent({
      gatewayUrl: gateway.baseUrl,
      agentId: AGENT_ID,
      environmentId,
      apiKey: adminKey,
      reply: REPLY,
      responseLatencyMs: AGENT_THINKING_MS,
      stallAfterTurns: ANSWERED_TURNS
    })
    teardown.add("the answering agent", () => agent.close())
    agent.on("call", (start) => calls.push(start))
    agent.on("turn", ({ turn }) => {
      if (turn <= ANSWERED_TURNS) say.say("agent", `heard the end of turn ${turn}; replies after ${AGENT_THINKING_MS} ms of thinking`)
    })
    agent.on("stalled", ({ turn }) => say.say("agent", `heard the end of turn ${turn}; stalls: says nothing`))
    agent.on("callEnded", ({ code, turns, replies }) =>
      say.say("agent", `callgate sent stop and closed the agent's socket (${code}) after ${turns} turns, ${replies} replies`)
    )
    await agent.ready(10_000)
    say.say(
      "agent",
      `examples/agents/answering-agent.ts: dial-in socket open to /v1/agents/${AGENT_ID}/environments/${environmentId}/connect`,
      `answers each caller turn after ${AGENT_THINKING_MS} ms of thinking, ${ANSWERED_TURNS} times; then stalls`
    )

    const callSid = `CA${randomBytes(16).toString("hex")}`
    const call = await placeTwilioCall({
      gatewayUrl: gateway.baseUrl,
      agentId: AGENT_ID,
      environmentId,
      callSid,
      accountSid,
      authToken,
      from: CALLER_NUMBER,
      to: AGENT_NUMBER
    })
    teardown.add("the simulated call", async () => {
      if (call.isOpen) await call.hangup()
    })
    say.say(
      "caller",
      `Twilio call ${shortId(callSid)} from ${CALLER_NUMBER} to ${AGENT_NUMBER}: signed voice webhook answered <Connect><Stream>`,
      `media stream ${shortId(call.streamId)} open: connected, start, then one 160-byte mu-law frame every 20 ms`
    )
    const start = await calls.next(() => true, 10_000, "the call to reach the agent")
    const sessionId = start.customParameters.sessionId
    if (sessionId === undefined) throw new DemoFailure("the agent's start frame carried no sessionId")
    say.say("agent", `call arrived: session ${sessionId}, from ${start.customParameters.from}, provider ${start.customParameters.provider}`)

    const heard = await answeredTurns(stage, api, call, sessionId)
    await stalledTurn(stage, services, call, callSid)
    await summary(stage, api, sessionId, heard)
  }
  const running = run()
  running.catch(() => {}) // when callgate crashed first, the steps still waiting fail later: already reported
  await Promise.race([running, crashed])
}

const main = async () => {
  const stage: Stage = { say: new Narrator(), teardown: new Teardown() }
  const { say, teardown } = stage
  let failure: string | undefined
  const deadline = new Promise<never>((_, reject) => {
    const timer = setTimeout(() => reject(new DemoFailure(`the demo did not finish within ${DEMO_DEADLINE_MS / 1000} s`)), DEMO_DEADLINE_MS)
    timer.unref()
  })
  const interrupted = new Promise<never>((_, reject) =>
    process.once("SIGINT", () => reject(new DemoFailure("interrupted (SIGINT)")))
  )
  try {
    const touring = tour(stage)
    touring.catch(() => {}) // past the deadline or on SIGINT it is abandoned, and reported as such
    await Promise.race([touring, deadline, interrupted])
  } catch (error) {
    failure = error instanceof DemoFailure ? error.message : `${(error as Error).stack ?? error}`
    say.mute()
  }
  const teardownFailures = await teardown.run()
  if (failure === undefined && teardownFailures.length > 0) failure = `could not stop cleanly: ${teardownFailures.join("; ")}`
  if (failure !== undefined) {
    process.stderr.write(`\ndemo FAILED: ${failure}\n`)
    if (stage.gateway) process.stderr.write(`callgate's last output:\n${stage.gateway.tail().map((line) => `  ${line}`).join("\n")}\n`)
    return 1
  }
  say.say("demo", `done in ${say.elapsed()}: every process and server stopped`)
  return 0
}

const code = await main()
process.exitCode = code
// Everything is closed, so the process ends by itself; this only guards against a handle left open.
setTimeout(() => {
  process.stderr.write("demo: something was still open after the end; exiting anyway\n")
  process.exit(code)
}, 3000).unref()
