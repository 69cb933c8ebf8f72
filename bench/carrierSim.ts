/**
 * The carrier side of the load, as its own process: N concurrent simulated Twilio calls (the
 * simulator in sim/), each sending one stamped 160-byte mu-law frame every 20 ms on a
 * drift-free clock and playing out what comes back. Each caller speaks a recorded sentence, waits
 * for the agent's answer to play, and speaks again, for as long as the call lasts.
 *
 * Against callgate a call is placed as Twilio does it (voice webhook, then the TwiML's stream URL),
 * or as a Telnyx TeXML call in a given codec (`telnyxCodec`, the formats part);
 * against the bare relay the stream goes straight to /carrier/<call>. Driven over IPC by
 * relayLoad.ts (see serveWorker): setup, grow, record, windowOpen, windowClose, settle, hangupAll,
 * stop. After hangupAll the next grow numbers calls from 1 again (the relay's keys are reused).
 */
import { fileURLToPath } from "node:url"
import { readUlawFile } from "../sim/AudioSource.js"
import { connectTwilioStream, placeTwilioCall } from "../sim/TwilioCall.js"
import { placeTelnyxTexmlCall } from "../sim/TelnyxCall.js"
import type { SimStreamCodec } from "../sim/StreamCodec.js"
import type { SimCall } from "../sim/SimCall.js"
import { serveWorker, sleep } from "./benchProcess.js"
import { ReceiveLedger, SendLedger, type SentRanges } from "./frameLedger.js"
import { LoadWindow } from "./loadStats.js"

export type CarrierTarget =
  | { readonly mode: "relay"; readonly relayUrl: string }
  | {
      readonly mode: "gateway"
      readonly gatewayUrl: string
      readonly agentId: string
      readonly environmentId: string
      /** Telnyx TeXML calls streaming in this codec (the formats part), instead of Twilio calls. */
      readonly telnyxCodec?: SimStreamCodec
    }

/** The caller's number carries the call's index, so the agent side (and the fallback bench) can tell calls apart. */
export const callerNumber = (index: number) => `+1555${String(index).padStart(7, "0")}`

const fixture = (name: string) => readUlawFile(fileURLToPath(new URL(`../test/fixtures/audio/${name}.ulaw`, import.meta.url)))

let target: CarrierTarget | undefined
const calls = new Map<number, SimCall>()
const counters = { turns: 0, answers: 0, closedByGateway: 0, protocolErrors: 0 }
const ledger = new ReceiveLedger()
const sent = new SendLedger(function* () {
  for (const [index, call] of calls) yield [index, call.stats.framesSent] as const
})
const load = new LoadWindow()
let windowCounters = { ...counters }
let stopping = false
let sentences: ReadonlyArray<Buffer> = []

const random = (min: number, max: number) => min + Math.random() * (max - min)

/** Speaks, leaves room for the answer (the agent waits 0.9 s, then talks for about 4.7 s), repeats. */
const converse = async (call: SimCall, index: number) => {
  await call.pause(random(0, 5000))
  let sentence = index
  while (call.isOpen && !stopping) {
    counters.turns++
    await call.play(sentences[sentence++ % sentences.length]!)
    await call.pause(random(6500, 8000))
  }
}

const placeCall = async (index: number): Promise<SimCall> => {
  if (target === undefined) throw new Error("setup first")
  const common = { stampCallId: index }
  if (target.mode === "relay") return connectTwilioStream({ ...common, url: `${target.relayUrl}/carrier/${index}`, customParameters: { from: callerNumber(index) } })
  const call = { ...common, gatewayUrl: target.gatewayUrl, agentId: target.agentId, environmentId: target.environmentId, from: callerNumber(index) }
  return target.telnyxCodec !== undefined ? placeTelnyxTexmlCall({ ...call, codec: target.telnyxCodec }) : placeTwilioCall(call)
}

const grow = async ({ to, perSecond, concurrency }: { to: number; perSecond: number; concurrency: number }) => {
  const errors: Array<string> = []
  let next = calls.size + 1
  let failed = 0
  const startedAt = performance.now()
  let launched = 0
  const worker = async () => {
    while (next <= to) {
      const index = next++
      // Paced: call k of this step starts no earlier than k / perSecond seconds in.
      const due = startedAt + (launched++ * 1000) / perSecond
      if (due > performance.now()) await sleep(due - performance.now())
      try {
        const call = await placeCall(index)
        calls.set(index, call)
        call.on("agentMedia", (media) => ledger.receive(media.payload, media.atUs))
        call.on("agentAnswer", () => counters.answers++)
        call.on("protocolError", () => counters.protocolErrors++)
        call.on("closed", (info) => {
          if (info.by === "gateway") counters.closedByGateway++
        })
        void converse(call, index)
      } catch (error) {
        failed++
        if (errors.length < 5) errors.push((error as Error).message)
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  let open = 0
  for (const call of calls.values()) if (call.isOpen) open++
  return { open, failed, errors }
}

/** Every caller hangs up (stop, then a normal close); resolves once every stream is closed. */
const hangupAll = async () => {
  const ending = [...calls.values()]
  calls.clear()
  await Promise.all(ending.map((call) => call.hangup("bench step over").catch(() => undefined)))
}

serveWorker({
  setup: (body: { target: CarrierTarget }) => {
    target = body.target
    sentences = [fixture("caller-appointment"), fixture("caller-account"), fixture("caller-appointment-noisy")]
  },
  grow,
  record: () => ledger.record(),
  windowOpen: () => {
    sent.open()
    load.open()
    windowCounters = { ...counters }
  },
  windowClose: () => {
    const ranges: SentRanges = sent.close()
    let open = 0
    for (const call of calls.values()) if (call.isOpen) open++
    return {
      ranges,
      load: load.close(),
      open,
      turns: counters.turns - windowCounters.turns,
      answers: counters.answers - windowCounters.answers,
      closedByGateway: counters.closedByGateway - windowCounters.closedByGateway,
      protocolErrors: counters.protocolErrors - windowCounters.protocolErrors
    }
  },
  settle: (body: { ranges: SentRanges }) => ledger.settle(body.ranges),
  hangupAll,
  stop: async () => {
    stopping = true
    await hangupAll()
  }
})
