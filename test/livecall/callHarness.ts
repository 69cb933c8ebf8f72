import { readFileSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { Context, Effect, Layer, ManagedRuntime, Queue, Scope } from "effect"
import { WebSocket, WebSocketServer } from "ws"
import { AgentPool } from "../../src/agent/AgentPool.js"
import { G722Encoder } from "../../src/audio/G722.js"
import { mulawToLinear } from "../../src/kernel/AudioFormat.js"
import type { CallKind } from "../../src/kernel/Carrier.js"
import { Environments } from "../../src/environments/Environments.js"
import type { UpdateEnvironmentBody } from "../../src/environments/EnvironmentSchema.js"
import { appLayer } from "../../src/layers.js"
import { CarrierCallEvent, CarrierCallEvents } from "../../src/livecall/CarrierCallEvents.js"
import { LiveCalls } from "../../src/livecall/LiveCalls.js"
import { Sessions } from "../../src/sessions/Sessions.js"
import { SessionTokens } from "../../src/telephony/SessionTokens.js"
import { Deliveries } from "../../src/webhooks/Deliveries.js"
import type { SessionEndedEvent } from "../../src/webhooks/SessionEndedEvent.js"
import { type FakeTelnyx, startFakeTelnyx } from "../support/fakeTelnyx.js"
import { type FakeTwilio, startFakeTwilio } from "../support/fakeTwilio.js"
import { freePort } from "../support/redisServer.js"
import { ADMIN_KEY, type StoreKind, uniqueId, withTestConfig } from "../support/testApp.js"

/**
 * End-to-end call harness: callgate listening on 127.0.0.1 with the real relay, carrier REST
 * pointed at the fake Twilio and Telnyx servers, and a recording Outbox. Carrier and agent
 * clients are plain `ws` sockets that speak the dialects as written in the carriers' docs,
 * independently of callgate's own encoders.
 */

export const until = async (check: () => boolean, what: string, timeoutMs = 30_000) => {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

/** A fixture file as 20 ms mu-law frames (160 bytes), base64: real speech. */
export const audioFrames = (file: string, limit = Number.POSITIVE_INFINITY): Array<string> => {
  const bytes = readFileSync(new URL(`../fixtures/audio/${file}`, import.meta.url))
  const frames: Array<string> = []
  for (let offset = 0; offset + 160 <= bytes.length && frames.length < limit; offset += 160) {
    frames.push(bytes.subarray(offset, offset + 160).toString("base64"))
  }
  return frames
}

/** Mu-law frames as a G.722 stream: 16 kHz by linear interpolation, through one encoder (one per call). */
export const g722Stream = (frames: ReadonlyArray<string>): Array<string> => {
  const encoder = new G722Encoder()
  let previous = 0
  return frames.map((frame) => {
    const mulaw = Buffer.from(frame, "base64")
    const wide = new Int16Array(mulaw.length * 2)
    mulaw.forEach((byte, i) => {
      const sample = mulawToLinear(byte)
      wide[2 * i] = (previous + sample) >> 1
      wide[2 * i + 1] = sample
      previous = sample
    })
    const codes = Buffer.alloc(mulaw.length)
    encoder.encode(wide, wide.length, codes)
    return codes.toString("base64")
  })
}

// ---------------------------------------------------------------------------------------------
// Sockets

export interface Closed {
  readonly code: number
  readonly reason: string
}

/** A ws socket with everything it received kept in order, parsed as JSON. */
export class Peer {
  readonly received: Array<any> = []
  closed: Closed | undefined
  readonly done: Promise<Closed>

  constructor(readonly ws: WebSocket) {
    ws.on("message", (data) => {
      try {
        this.received.push(JSON.parse(data.toString()))
      } catch {
        this.received.push({ unparsable: data.toString() })
      }
    })
    this.done = new Promise((resolve) =>
      ws.on("close", (code, reason) => {
        this.closed = { code, reason: reason.toString() }
        resolve(this.closed)
      })
    )
    ws.on("error", () => {})
  }

  send(message: unknown) {
    this.ws.send(typeof message === "string" ? message : JSON.stringify(message))
  }

  events(event: string) {
    return this.received.filter((m) => m.event === event)
  }

  async waitFor(check: (received: Array<any>) => boolean, what: string, timeoutMs = 30_000) {
    await until(() => check(this.received), what, timeoutMs)
  }

  async waitForEvent(event: string, count = 1, timeoutMs = 30_000) {
    await this.waitFor((r) => r.filter((m) => m.event === event).length >= count, `${count} ${event}`, timeoutMs)
    return this.events(event)
  }

  async waitClosed(timeoutMs = 30_000): Promise<Closed> {
    return Promise.race([
      this.done,
      new Promise<Closed>((_, reject) => setTimeout(() => reject(new Error("socket did not close")), timeoutMs))
    ])
  }

  close() {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.terminate()
  }
}

export const openSocket = (url: string, headers: Record<string, string> = {}, options: { autoPong?: boolean } = {}) =>
  new Promise<Peer>((resolve, reject) => {
    const ws = new WebSocket(url, { headers, ...options })
    const peer = new Peer(ws)
    ws.once("open", () => resolve(peer))
    ws.once("unexpected-response", (_request, response) => reject(Object.assign(new Error(`upgrade refused: ${response.statusCode}`), { status: response.statusCode })))
    ws.once("error", reject)
  })

/** The HTTP status of a refused upgrade (and the JSON error body's code). */
export const refusedUpgrade = (url: string, headers: Record<string, string> = {}) =>
  new Promise<{ status: number; code: string | undefined }>((resolve, reject) => {
    const ws = new WebSocket(url, { headers })
    ws.once("open", () => {
      ws.terminate()
      reject(new Error("the upgrade was accepted"))
    })
    ws.once("unexpected-response", (_request, response) => {
      let body = ""
      response.on("data", (chunk) => (body += chunk))
      response.on("end", () => {
        let code: string | undefined
        try {
          code = JSON.parse(body).error?.code
        } catch {
          code = undefined
        }
        resolve({ status: response.statusCode ?? 0, code })
      })
    })
    ws.once("error", () => {})
  })

// ---------------------------------------------------------------------------------------------
// Carrier clients

export interface CarrierCall {
  readonly peer: Peer
  readonly streamId: string
  start(): void
  media(payload: string, chunk?: number): void
  dtmf(digit: string): void
  /** Echo of a mark callgate sent (the carrier played the audio before it). */
  mark(name: string): void
  stop(): void
  /** Audio payloads callgate sent to the carrier, in order. */
  sentMedia(): Array<string>
}

/** A Twilio Media Streams client (what Twilio does after `<Connect><Stream>`). */
export const twilioCall = async (
  gateway: Gateway,
  options: { token?: string; callSid: string; signature?: string | null; extraParameters?: Record<string, string> }
): Promise<CarrierCall> => {
  const url = `${gateway.wsBase}/telephony/twilio/stream`
  const signature = options.signature === undefined ? gateway.twilio.sign(gateway.signedStreamUrl("twilio")) : options.signature
  const peer = await openSocket(url, signature === null ? {} : { "X-Twilio-Signature": signature })
  const streamSid = `MZ${uniqueId("s").replace(/[^A-Za-z0-9]/g, "")}`
  let seq = 0
  let chunk = 0
  const send = (frame: Record<string, unknown>) => peer.send({ ...frame, sequenceNumber: String(++seq), streamSid })
  peer.send({ event: "connected", protocol: "Call", version: "1.0.0" })
  return {
    peer,
    streamId: streamSid,
    start: () =>
      send({
        event: "start",
        start: {
          accountSid: gateway.twilio.accountSid,
          streamSid,
          callSid: options.callSid,
          tracks: ["inbound"],
          mediaFormat: { encoding: "audio/x-mulaw", sampleRate: 8000, channels: 1 },
          customParameters: { ...(options.token !== undefined ? { token: options.token } : {}), ...options.extraParameters }
        }
      }),
    media: (payload, n) => {
      chunk = n ?? chunk + 1
      send({ event: "media", media: { track: "inbound", chunk: String(chunk), timestamp: String(chunk * 20), payload } })
    },
    dtmf: (digit) => send({ event: "dtmf", dtmf: { track: "inbound_track", digit } }),
    mark: (name) => send({ event: "mark", mark: { name } }),
    stop: () => send({ event: "stop", stop: { accountSid: gateway.twilio.accountSid, callSid: options.callSid } }),
    sentMedia: () => peer.events("media").map((m) => m.media.payload)
  }
}

/** A Telnyx media streaming client (bidirectional RTP, PCMU). */
export const telnyxCall = async (
  gateway: Gateway,
  options: { token?: string; callControlId: string; headers?: Record<string, string>; encoding?: string; sampleRate?: number }
): Promise<CarrierCall> => {
  const query = options.token !== undefined ? `?token=${encodeURIComponent(options.token)}` : ""
  const peer = await openSocket(`${gateway.wsBase}/telephony/telnyx/stream${query}`, options.headers ?? {})
  const streamId = crypto.randomUUID()
  let seq = 0
  let chunk = 0
  const send = (frame: Record<string, unknown>) => peer.send({ ...frame, sequence_number: String(++seq), stream_id: streamId })
  peer.send({ event: "connected", version: "1.0.0" })
  return {
    peer,
    streamId,
    start: () =>
      send({
        event: "start",
        start: {
          user_id: "3E6F995F-85F7-4705-9741-53B116D28237",
          call_control_id: options.callControlId,
          call_session_id: crypto.randomUUID(),
          from: "+13122010094",
          to: "+13122123456",
          tags: [],
          client_state: null,
          custom_parameters: {},
          media_format: { encoding: options.encoding ?? "PCMU", sample_rate: options.sampleRate ?? 8000, channels: 1 }
        }
      }),
    media: (payload, n) => {
      chunk = n ?? chunk + 1
      send({ event: "media", media: { track: "inbound", chunk: String(chunk), timestamp: String(chunk * 20), payload } })
    },
    dtmf: (digit) => send({ event: "dtmf", occurred_at: new Date().toISOString(), dtmf: { digit } }),
    mark: (name) => send({ event: "mark", mark: { name } }),
    stop: () => send({ event: "stop", stop: { user_id: "u", call_control_id: options.callControlId } }),
    sentMedia: () => peer.events("media").map((m) => m.media.payload)
  }
}

// ---------------------------------------------------------------------------------------------
// Agents

/** A dial-in agent worker: connects and waits for a call. */
export const dialInAgent = (gateway: Gateway, agentId: string, environmentId: string, key = ADMIN_KEY, options: { autoPong?: boolean } = {}) =>
  openSocket(`${gateway.wsBase}/v1/agents/${agentId}/environments/${environmentId}/connect`, { authorization: `Bearer ${key}` }, options)

/** An agent process callgate dials out to (environment agentUrl). */
export interface AgentServer {
  readonly url: string
  readonly peers: Array<Peer>
  readonly close: () => Promise<void>
}

export const startAgentServer = async (): Promise<AgentServer> => {
  const server: Server = createServer()
  const wss = new WebSocketServer({ server })
  const peers: Array<Peer> = []
  wss.on("connection", (ws) => peers.push(new Peer(ws)))
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `ws://127.0.0.1:${port}/agent`,
    peers,
    close: () =>
      new Promise<void>((resolve) => {
        for (const client of wss.clients) client.terminate()
        wss.close()
        server.close(() => resolve())
      })
  }
}

/** Payloads the agent received as caller audio, in order. */
export const agentMedia = (agent: Peer) => agent.events("media").map((m) => m.media.payload)

// ---------------------------------------------------------------------------------------------
// The gateway

export interface RecordingOutbox {
  readonly events: Array<SessionEndedEvent>
  readonly forSession: (sessionId: string) => Promise<SessionEndedEvent>
}

/** Subscribes to the outbox's accepted events for the runtime's lifetime. */
const recordingOutbox = async (runtime: ManagedRuntime.ManagedRuntime<Deliveries, unknown>) => {
  const events: Array<SessionEndedEvent> = []
  // The subscription ends when the outbox's PubSub shuts down with the runtime.
  await runtime.runPromise(
    Effect.gen(function* () {
      const deliveries = yield* Deliveries
      const subscription = yield* deliveries.acceptedEvents
      yield* Queue.take(subscription).pipe(
        Effect.tap((event) => Effect.sync(() => void events.push(event))),
        Effect.forever,
        Effect.forkDaemon
      )
    }).pipe(Effect.provideServiceEffect(Scope.Scope, Scope.make()))
  )
  const outbox: RecordingOutbox = {
    events,
    forSession: async (sessionId) => {
      await until(() => events.some((e) => e.sessionId === sessionId), `session.ended for ${sessionId}`, 30_000)
      return events.find((e) => e.sessionId === sessionId)!
    }
  }
  return { outbox }
}

export interface Gateway {
  readonly httpBase: string
  readonly wsBase: string
  readonly twilio: FakeTwilio
  readonly telnyx: FakeTelnyx
  readonly outbox: RecordingOutbox
  readonly run: <A, E>(effect: Effect.Effect<A, E, any>) => Promise<A>
  readonly createEnvironment: (agentId: string, patch?: UpdateEnvironmentBody) => Promise<{ id: string }>
  readonly issueToken: (claims: {
    agentId: string
    environmentId: string
    kind: CallKind
    callId: string
    from?: string
    to?: string
    direction?: "inbound" | "outbound"
    accountSid?: string
    /** The environment's recording mode as an admission would have read it. */
    recording?: "on" | "off"
  }) => string
  /** The URL Twilio signs for a stream upgrade (built from PUBLIC_URL, as Twilio was told). */
  readonly signedStreamUrl: (provider: "twilio") => string
  readonly hangUpCall: (callId: string) => Promise<void>
  readonly idleAgents: (agentId: string, environmentId: string) => number
  /** Sessions live on this gateway. */
  readonly liveCount: () => number
  readonly registry: LiveCalls
  readonly close: () => Promise<void>
}

const PUBLIC_URL = "https://callgate.test"


export interface GatewayOptions {
  readonly store?: StoreKind
  readonly env?: Record<string, string>
  /** `"test"`: the gateway's Clock is a TestClock (testApp.ts, testClockLayer), moved by `run(TestClock.adjust(...))`. */
  readonly clock?: "live" | "test"
}

/**
 * Starts callgate on 127.0.0.1 exactly as `src/main.ts` does (`appLayer`: services, server,
 * delivery worker, drain), with carrier REST pointed at the fake Twilio and Telnyx servers and
 * SHUTDOWN_DRAIN_TIMEOUT 2s unless given. `outbox` records every session.ended the outbox accepts.
 */
export const startGateway = async (options: GatewayOptions = {}): Promise<Gateway> => {
  const [twilio, telnyx, port] = await Promise.all([startFakeTwilio(), startFakeTelnyx(), freePort()])
  const env = {
    PUBLIC_URL,
    HOST: "127.0.0.1",
    PORT: String(port),
    ...twilio.env,
    ...telnyx.env,
    RATE_LIMIT_PER_MINUTE: "0",
    SHUTDOWN_DRAIN_TIMEOUT: "2s",
    ...options.env
  }
  const runtime = ManagedRuntime.make(withTestConfig(appLayer, options.store ?? "memory", env, { clock: options.clock ?? "live" }))
  const recording = await recordingOutbox(runtime)
  const run = <A, E>(effect: Effect.Effect<A, E, any>) => runtime.runPromise(effect as Effect.Effect<A, E, never>)
  const tokens = await run(SessionTokens)
  const pool = await run(AgentPool)
  const registry = await run(LiveCalls)
  return {
    httpBase: `http://127.0.0.1:${port}`,
    wsBase: `ws://127.0.0.1:${port}`,
    twilio,
    telnyx,
    outbox: recording.outbox,
    run,
    createEnvironment: (agentId, patch = {}) =>
      run(Effect.flatMap(Environments, (envs) => envs.create(agentId, { name: "test line", ...patch }))),
    issueToken: (claims) => tokens.issue({ direction: "inbound", ...claims }),
    signedStreamUrl: () => `${PUBLIC_URL.replace(/^https/, "wss")}/telephony/twilio/stream`,
    hangUpCall: (callId) => run(Effect.flatMap(CarrierCallEvents, (events) => events.publish(CarrierCallEvent.CallHungUp({ callId })))).then(() => {}),
    idleAgents: (agentId, environmentId) => pool.idleCount(agentId, environmentId),
    liveCount: () => registry.liveCount(),
    registry,
    close: async () => {
      await runtime.dispose()
      await Promise.all([twilio.close(), telnyx.close()])
    }
  }
}

/** A session's stored record. */
export const storedSession = (gateway: Gateway, agentId: string, sessionId: string) =>
  gateway.run(Effect.flatMap(Sessions, (sessions) => sessions.get(agentId, sessionId)))

/** The sessionId callgate gave the agent in `start`. */
export const sessionIdOf = (agent: Peer): string => agent.events("start")[0]!.start.customParameters.sessionId
