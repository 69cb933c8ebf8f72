/**
 * `callgate-sim carrier`: runs the local carrier (TwilioCarrier.ts) until SIGINT/SIGTERM, answering
 * every outbound call callgate places through it with a callee that says a few turns and hangs up.
 * See docs/simulator.md, "A local carrier".
 */
import { parseArgs } from "node:util"
import { performance } from "node:perf_hooks"
import { loadAudio } from "./AudioSource.js"
import { durationMs } from "./Mulaw.js"
import { type CalleeBehaviour, startTwilioCarrier } from "./TwilioCarrier.js"

export const CARRIER_USAGE = `Usage: callgate-sim carrier [options]

A Twilio-compatible carrier on loopback for outbound calls: start it, start callgate with the
three TWILIO_* variables it prints, and place calls with POST /v1/.../calls. Each call rings, is
answered (its TwiML fetched, its media stream opened, signed like Twilio's), the callee says
--turns turns, waiting for the agent's answer to each, and hangs up. Runs until Ctrl-C.

Options:
  --port PORT            where to listen on 127.0.0.1 (default 8090; 0 for any free port)
  --account-sid SID      the account callgate authenticates as (default AC00000000000000000000000000000001)
  --auth-token TOKEN     its auth token, also used to sign webhooks and streams (default local-carrier-auth-token)
  --behaviour WHAT       answer (default), busy, no-answer or fail: what every called number does
  --ring MS              how long each call rings first (default 300)
  --turns N              what the callee says once answered: N turns (default 2), then it hangs up
  --audio SPEC           each turn's audio, as for callgate-sim (default speech)
  --answer-timeout SEC   how long each turn waits for the agent's answer (default 10)
  --pause MS             silence between turns (default 500)
  --help                 this text`

export const runCarrierCli = async (argv: ReadonlyArray<string>): Promise<number> => {
  let values
  try {
    values = parseArgs({
      args: [...argv],
      options: {
        port: { type: "string", default: "8090" },
        "account-sid": { type: "string", default: "AC00000000000000000000000000000001" },
        "auth-token": { type: "string", default: "local-carrier-auth-token" },
        behaviour: { type: "string", default: "answer" },
        ring: { type: "string", default: "300" },
        turns: { type: "string", default: "2" },
        audio: { type: "string", default: "speech" },
        "answer-timeout": { type: "string", default: "10" },
        pause: { type: "string", default: "500" },
        help: { type: "boolean", default: false }
      },
      strict: true
    }).values
  } catch (error) {
    process.stderr.write(`callgate-sim carrier: ${(error as Error).message}\n\n${CARRIER_USAGE}\n`)
    return 2
  }
  if (values.help) {
    process.stdout.write(`${CARRIER_USAGE}\n`)
    return 0
  }
  const bad = (message: string) => {
    process.stderr.write(`callgate-sim carrier: ${message}\n`)
    return 2
  }
  const numberOf = (name: string, text: string) => {
    const value = Number(text)
    return Number.isFinite(value) && value >= 0 ? value : undefined
  }
  const behaviour = values.behaviour as CalleeBehaviour
  if (!["answer", "busy", "no-answer", "fail"].includes(behaviour)) return bad(`--behaviour must be answer, busy, no-answer or fail, got "${values.behaviour}"`)
  if (!/^AC[0-9a-fA-F]{32}$/.test(values["account-sid"]!)) return bad(`--account-sid must be AC followed by 32 hex digits`)
  const port = numberOf("port", values.port!)
  const ringMs = numberOf("ring", values.ring!)
  const turns = numberOf("turns", values.turns!)
  const answerTimeout = numberOf("answer-timeout", values["answer-timeout"]!)
  const pauseMs = numberOf("pause", values.pause!)
  if (port === undefined || ringMs === undefined || turns === undefined || answerTimeout === undefined || pauseMs === undefined) {
    return bad("--port, --ring, --turns, --answer-timeout and --pause take numbers >= 0")
  }
  let audio: Buffer
  try {
    audio = loadAudio(values.audio!)
  } catch (error) {
    return bad((error as Error).message)
  }

  const startedAt = performance.now()
  const log = (message: string) => process.stdout.write(`[${((performance.now() - startedAt) / 1000).toFixed(3).padStart(7)}s] ${message}\n`)
  let carrier
  try {
    carrier = await startTwilioCarrier({
      port,
      accountSid: values["account-sid"],
      authToken: values["auth-token"],
      ringMs,
      behaviour,
      onAnswer: async (call, stream) => {
        for (let turn = 1; turn <= turns && stream.isOpen; turn++) {
          if (turn > 1) await stream.pause(pauseMs)
          log(`call ${call.sid}: callee turn ${turn} (${durationMs(audio)} ms)`)
          const result = await stream.turn(audio, { answerTimeoutMs: answerTimeout * 1000 })
          log(
            result.answer.answered
              ? `call ${call.sid}: turn ${turn} answered after ${Math.round(result.answer.latencyMs)} ms`
              : `call ${call.sid}: turn ${turn} ${result.answer.reason === "closed" ? "cut short: the stream closed" : "not answered"}`
          )
        }
        if (stream.isOpen) {
          log(`call ${call.sid}: callee hangs up`)
          await stream.hangup()
        }
      }
    })
  } catch (error) {
    return bad(`cannot listen on 127.0.0.1:${port}: ${(error as Error).message}`)
  }
  carrier.on("log", log)
  log(`local Twilio-compatible carrier on ${carrier.url}: start callgate with`)
  process.stdout.write(`  TWILIO_ACCOUNT_SID=${carrier.accountSid} TWILIO_AUTH_TOKEN=${carrier.authToken} TWILIO_API_BASE_URL=${carrier.url}\n`)
  log(`every call: rings ${ringMs} ms, then ${behaviour === "answer" ? `answers and says ${turns} turn(s)` : behaviour}`)
  return new Promise((resolve) => {
    const stop = () => {
      log("stopping: hanging up every call")
      void carrier.close().then(() => resolve(0))
    }
    process.once("SIGINT", stop)
    process.once("SIGTERM", stop)
  })
}
