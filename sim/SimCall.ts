import { EventEmitter } from "node:events"
import { performance } from "node:perf_hooks"
import type { EntryAnswer, RedirectAnswer } from "./CallEntry.js"
import type { CarrierDialect } from "./CarrierDialect.js"
import { nowUs, writeStamp } from "./FrameStamp.js"
import { FramePacer } from "./FramePacer.js"
import { DEFAULT_VOICED_RMS, FRAME_BYTES, FRAME_MS, MULAW_SILENCE, isVoicedFrame, padToFrames } from "./Mulaw.js"
import { Playout } from "./Playout.js"
import { openSimSocket, SOCKET_CONNECTING, SOCKET_OPEN, type SimSocket, type SimSocketData, type SimSocketOptions } from "./WsSimSocket.js"
import { type AgentAnswer, AnswerDetector } from "./AnswerDetector.js"
import { FrameShuffler } from "./FrameShuffler.js"
import type { SimAudioCodec } from "./StreamCodec.js"

/** A simulated call could not be placed or failed, with a sentence saying what happened. */
export class SimError extends Error {
  override readonly name = "SimError"
  constructor(
    message: string,
    readonly kind: "webhook" | "markup" | "connect" | "closed",
    readonly status?: number,
    readonly body?: string
  ) {
    super(message)
  }
}

export interface SimCallOptions {
  /** Extra headers on the WebSocket upgrade. */
  readonly headers?: Readonly<Record<string, string>>
  /** Options for the `ws` client (e.g. `ca` for a test CA). */
  readonly wsOptions?: SimSocketOptions
  /**
   * Stamp every outgoing frame with this call id (see FrameStamp): the frame's chunk number is the
   * sequence number and the send time is taken just before the frame is sent.
   */
  readonly stampCallId?: number
  /** Send silence while nothing is playing, as carriers do. Default true. */
  readonly continuousMedia?: boolean
  /** Send media frames shuffled within windows of this many frames (Telnyx reordering tests). */
  readonly shuffleWindow?: number
  readonly shuffleSeed?: number
  /** Energy threshold for "the agent is speaking" (RMS, 16-bit scale). Default DEFAULT_VOICED_RMS. */
  readonly voicedRms?: number
  /**
   * The carrier's playout delay (its jitter buffer and the path to the caller's ear): audio that
   * arrives with nothing queued starts playing this many milliseconds later, and marks are echoed
   * once the audio before them has played. Default 0.
   */
  readonly playoutDelayMs?: number
  /**
   * The stream's codec (Telnyx: StreamCodec.ts): the caller's mu-law is sent in it and the gateway's
   * audio read back from it. Default: 8 kHz mu-law as is.
   */
  readonly audioCodec?: SimAudioCodec
}

export interface AgentMedia {
  /** The decoded audio of one `media` message as 8 kHz mu-law (usually 160 bytes), whatever the stream's codec. */
  readonly payload: Buffer
  /** Receive time, `nowUs()` clock. */
  readonly atUs: number
  readonly voiced: boolean
}

export type { AgentAnswer } from "./AnswerDetector.js"

export type AnswerWait = ({ readonly answered: true } & AgentAnswer) | { readonly answered: false; readonly reason: "timeout" | "closed" }

export interface CloseInfo {
  readonly code: number
  readonly reason: string
  /** Who closed the stream: the simulator (hangup) or the gateway. */
  readonly by: "simulator" | "gateway"
}

export interface SimCallEvents {
  open: []
  agentMedia: [AgentMedia]
  /** The agent began answering the caller's latest input (first voiced frame after it). */
  agentAnswer: [AgentAnswer]
  /** A mark arrived from the gateway. */
  mark: [{ readonly name: string; readonly atUs: number }]
  /** The simulator echoed a mark back: its audio played (`cleared` false) or a clear dropped it. */
  markEchoed: [{ readonly name: string; readonly cleared: boolean; readonly atUs: number }]
  clear: [{ readonly droppedMs: number; readonly atUs: number }]
  /** Something the gateway sent that a real carrier would reject or ignore. */
  protocolError: [string]
  closed: [CloseInfo]
}

export interface PlayResult {
  readonly framesSent: number
  /** False when the call ended before all of the audio was sent. */
  readonly completed: boolean
}

export interface TurnResult extends PlayResult {
  readonly answer: AnswerWait
  /** Agent media messages received from the start of the turn until the agent went quiet. */
  readonly agentMessages: number
  readonly agentBytes: number
}

interface PlayItem {
  readonly audio: Buffer
  offset: number
  sent: number
  readonly done: (result: PlayResult) => void
}

const SILENCE_FRAME = Buffer.alloc(FRAME_BYTES, MULAW_SILENCE)
const noop = () => {}

/**
 * One simulated carrier media stream over a WebSocket, in the dialect it is given: sends
 * `connected` and `start`, then one media frame every 20 ms on a drift-free clock (the queued
 * audio, or silence), DTMF and `stop`; receives the gateway's `media`, `mark` and `clear` and plays
 * them out like the carrier (marks echoed when their audio has played; `clear` returns outstanding
 * marks at once). Script it with play / pause / sendDtmf / waitForAgentAnswer / hangup.
 */
export class SimCall extends EventEmitter<SimCallEvents> {
  readonly stats = {
    framesSent: 0,
    voicedFramesSent: 0,
    dtmfSent: 0,
    agentMessages: 0,
    agentBytes: 0,
    agentVoicedMessages: 0,
    marksReceived: 0,
    marksEchoed: 0,
    clears: 0,
    protocolErrors: 0
  }
  /** Resolves once the stream is closed, by either side. */
  readonly closed: Promise<CloseInfo>
  /** For calls placed through an entry webhook: what the gateway answered (see CallEntry). */
  entry: EntryAnswer | undefined
  /**
   * With `followRedirect`: resolves, once the stream has ended, with what the gateway answered to the
   * `<Redirect>` the carrier followed (undefined when the simulator hung up). See CallEntry.
   */
  redirected: Promise<RedirectAnswer | undefined> | undefined

  private readonly ws: SimSocket
  private readonly pacer: FramePacer
  private readonly playout: Playout
  private readonly queue: Array<PlayItem> = []
  private readonly scratch = Buffer.alloc(FRAME_BYTES)
  private readonly shuffler: FrameShuffler | undefined
  private readonly answers = new AnswerDetector()
  private readonly voicedRms: number
  private seq = 1
  private chunk = 1
  private lastAgentVoicedMs = 0
  private readonly opened: Promise<void>
  private settleOpen: (error?: SimError) => void = noop
  private hangingUp = false
  private isClosed = false
  private resolveClosed!: (info: CloseInfo) => void

  constructor(
    readonly url: string,
    readonly dialect: CarrierDialect,
    private readonly options: SimCallOptions = {}
  ) {
    super()
    this.voicedRms = options.voicedRms ?? DEFAULT_VOICED_RMS
    this.shuffler =
      options.shuffleWindow !== undefined && options.shuffleWindow > 1 ? new FrameShuffler(options.shuffleWindow, options.shuffleSeed ?? 42) : undefined
    this.closed = new Promise((resolve) => (this.resolveClosed = resolve))
    this.pacer = new FramePacer(this.sendFrame)
    this.playout = new Playout(this.echoMark, undefined, options.playoutDelayMs ?? 0)
    this.opened = new Promise((resolve, reject) => {
      this.settleOpen = (error) => {
        this.settleOpen = noop
        if (error) reject(error)
        else resolve()
      }
    })
    // Never an unhandled rejection for callers that only listen to events.
    this.opened.catch(noop)
    this.ws = openSimSocket(url, { ...options.wsOptions, headers: { ...options.wsOptions?.headers, ...options.headers } })
    this.ws.once("open", this.onOpen)
    this.ws.on("error", this.onSocketError)
    this.ws.on("message", this.receive)
    this.ws.on("close", (code, reason) => this.finish({ code, reason: reason.toString(), by: this.hangingUp ? "simulator" : "gateway" }))
  }

  get provider() {
    return this.dialect.provider
  }

  get streamId() {
    return this.dialect.streamId
  }

  /** The codec the stream carries both ways (8 kHz mu-law unless audioCodec says otherwise). */
  get codec(): string {
    return this.options.audioCodec?.codec ?? "PCMU"
  }

  get isOpen() {
    return !this.isClosed && this.ws.readyState === SOCKET_OPEN
  }

  /**
   * Resolves once the socket is open and `connected` and `start` are sent (the media clock then
   * runs). Rejects with a SimError when the upgrade is refused or the socket fails first.
   */
  open(): Promise<void> {
    return this.opened
  }

  private readonly onOpen = () => {
    this.ws.send(this.dialect.connected())
    this.ws.send(this.dialect.start(this.seq++))
    this.pacer.start()
    this.emit("open")
    this.settleOpen()
  }

  private readonly onSocketError = (error: Error) => {
    if (this.settleOpen === noop) return this.emitProtocolError(`socket error: ${error.message}`)
    const status = /Unexpected server response: (\d+)/.exec(error.message)?.[1]
    this.settleOpen(new SimError(`stream connection to ${redactUrl(this.url)} failed: ${error.message}`, "connect", status ? Number(status) : undefined))
    this.finish({ code: 1006, reason: error.message, by: "gateway" })
  }

  /** Queues caller audio (mu-law) behind what is already queued; resolves when its last frame is sent. */
  play(audio: Buffer): Promise<PlayResult> {
    if (this.isClosed) return Promise.resolve({ framesSent: 0, completed: false })
    return new Promise((done) => this.queue.push({ audio: padToFrames(audio), offset: 0, sent: 0, done }))
  }

  /** Lets `ms` pass (silence keeps flowing). */
  pause(ms: number): Promise<void> {
    if (this.isClosed) return Promise.resolve()
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer)
        this.off("closed", done)
        resolve()
      }
      const timer = setTimeout(done, ms)
      this.once("closed", done)
    })
  }

  /** Sends each digit as a `dtmf` frame, `gapMs` apart. A digit counts as caller input. */
  async sendDtmf(digits: string, gapMs = 100): Promise<void> {
    for (const [i, digit] of [...digits].entries()) {
      if (!this.isOpen) return
      if (i > 0) await this.pause(gapMs)
      if (!this.isOpen) return
      this.flushShuffled()
      this.ws.send(this.dialect.dtmf(this.seq++, digit))
      this.stats.dtmfSent++
      this.answers.callerDigit(nowUs())
    }
  }

  /**
   * Resolves at the agent's first voiced frame after the caller's latest input (at once if it has
   * already come), or with `answered: false` after `timeoutMs` or when the call ends.
   */
  waitForAgentAnswer(options: { readonly timeoutMs?: number } = {}): Promise<AnswerWait> {
    const answered = this.answers.answerToLatestInput
    if (answered !== undefined) return Promise.resolve({ answered: true, ...answered })
    if (this.isClosed) return Promise.resolve({ answered: false, reason: "closed" })
    return new Promise((resolve) => {
      const finish = (result: AnswerWait) => {
        clearTimeout(timer)
        this.off("agentAnswer", onAnswer)
        this.off("closed", onClosed)
        resolve(result)
      }
      const onAnswer = (answer: AgentAnswer) => finish({ answered: true, ...answer })
      const onClosed = () => finish({ answered: false, reason: "closed" })
      const timer = setTimeout(() => finish({ answered: false, reason: "timeout" }), options.timeoutMs ?? 10_000)
      this.on("agentAnswer", onAnswer)
      this.on("closed", onClosed)
    })
  }

  /**
   * Resolves once the agent's audio has finished playing and no voiced agent audio arrived for
   * `quietMs` (default 400), or after `timeoutMs` (default 30 s), or when the call ends.
   */
  async waitForAgentQuiet(options: { readonly quietMs?: number; readonly timeoutMs?: number } = {}): Promise<void> {
    const quietMs = options.quietMs ?? 400
    const deadline = performance.now() + (options.timeoutMs ?? 30_000)
    while (this.isOpen && performance.now() < deadline) {
      const quietFor = performance.now() - Math.max(this.lastAgentVoicedMs, 0)
      if (this.playout.queuedMs() === 0 && quietFor >= quietMs) return
      await this.pause(FRAME_MS)
    }
  }

  /** One caller turn: plays `audio`, waits for the agent to answer, then for it to go quiet. */
  async turn(audio: Buffer, options: { readonly answerTimeoutMs?: number; readonly quietMs?: number } = {}): Promise<TurnResult> {
    const messagesBefore = this.stats.agentMessages
    const bytesBefore = this.stats.agentBytes
    const played = await this.play(audio)
    const answer = await this.waitForAgentAnswer({ timeoutMs: options.answerTimeoutMs ?? 10_000 })
    if (answer.answered) await this.waitForAgentQuiet({ quietMs: options.quietMs ?? 400 })
    return {
      ...played,
      answer,
      agentMessages: this.stats.agentMessages - messagesBefore,
      agentBytes: this.stats.agentBytes - bytesBefore
    }
  }

  /** Telnyx only: sends a stream `error` frame. */
  sendStreamError(code = 100002, title = "unknown_error", detail = "simulated stream error"): void {
    if (!this.dialect.error) throw new Error(`${this.provider} streams have no error frame`)
    if (this.isOpen) this.ws.send(this.dialect.error(this.seq++, code, title, detail))
  }

  /** Sends anything at all (malformed-frame tests). */
  sendRaw(data: string | Buffer): void {
    if (this.isOpen) this.ws.send(data)
  }

  /** The caller hangs up: `stop`, then a normal close. Resolves when the socket is closed. */
  async hangup(reason = "caller hung up"): Promise<CloseInfo> {
    if (this.isOpen && !this.hangingUp) {
      this.hangingUp = true
      this.pacer.stop()
      this.flushShuffled()
      this.ws.send(this.dialect.stop(this.seq++))
      this.ws.close(1000, reason)
    } else if (!this.isClosed && this.ws.readyState === SOCKET_CONNECTING) {
      this.hangingUp = true
      this.ws.terminate()
    }
    const closeTimer = setTimeout(() => this.ws.terminate(), 5000)
    const info = await this.closed
    clearTimeout(closeTimer)
    return info
  }

  /** Drops the connection without `stop` (a carrier-side network failure). */
  drop(): void {
    this.hangingUp = true
    this.ws.terminate()
  }

  private readonly sendFrame = (index: number): void => {
    if (this.ws.readyState !== SOCKET_OPEN) return
    const item = this.queue[0]
    let frame: Buffer
    if (item !== undefined) {
      frame = item.audio.subarray(item.offset, item.offset + FRAME_BYTES)
      item.offset += FRAME_BYTES
      item.sent++
    } else if (this.options.continuousMedia !== false) {
      frame = SILENCE_FRAME
    } else {
      return
    }
    const voiced = item !== undefined && isVoicedFrame(frame, this.voicedRms)
    const chunk = this.chunk++
    if (this.options.stampCallId !== undefined) {
      frame.copy(this.scratch)
      writeStamp(this.scratch, this.options.stampCallId, chunk, nowUs())
      frame = this.scratch
    }
    if (this.options.audioCodec !== undefined) frame = this.options.audioCodec.encode(frame)
    const message = this.dialect.media(this.seq++, chunk, index * FRAME_MS, frame.toString("base64"))
    if (this.shuffler !== undefined) this.shuffler.push(message, this.sendNow)
    else this.ws.send(message)
    this.stats.framesSent++
    this.answers.callerFrame(voiced, nowUs())
    if (voiced) this.stats.voicedFramesSent++
    if (item !== undefined && item.offset >= item.audio.length) {
      this.queue.shift()
      item.done({ framesSent: item.sent, completed: true })
    }
  }

  private readonly sendNow = (message: string): void => {
    if (this.ws.readyState === SOCKET_OPEN) this.ws.send(message)
  }

  private flushShuffled() {
    this.shuffler?.flush(this.sendNow)
  }

  private readonly receive = (data: SimSocketData, isBinary: boolean): void => {
    if (isBinary) return this.emitProtocolError("binary frame from the gateway (carriers accept JSON text only)")
    let message: any
    try {
      message = JSON.parse(data.toString())
    } catch {
      return this.emitProtocolError("frame from the gateway is not JSON")
    }
    if (typeof message !== "object" || message === null) return this.emitProtocolError("frame from the gateway is not a JSON object")
    const id = message[this.dialect.streamIdField]
    if (id === undefined ? this.provider === "twilio" : id !== this.streamId) {
      this.emitProtocolError(`${message.event} frame with ${this.dialect.streamIdField} ${JSON.stringify(id)}; expected ${JSON.stringify(this.streamId)}`)
    }
    switch (message.event) {
      case "media":
        return this.receiveMedia(message.media?.payload)
      case "mark": {
        const name = message.mark?.name
        if (typeof name !== "string") return this.emitProtocolError("mark frame without mark.name")
        this.stats.marksReceived++
        this.emit("mark", { name, atUs: nowUs() })
        return this.playout.mark(name)
      }
      case "clear": {
        this.stats.clears++
        const droppedMs = this.playout.clear()
        this.emit("clear", { droppedMs, atUs: nowUs() })
        return
      }
      default:
        return this.emitProtocolError(`unknown event ${JSON.stringify(message.event)} from the gateway`)
    }
  }

  private receiveMedia(payload: unknown) {
    if (typeof payload !== "string" || payload.length === 0 || payload.length % 4 !== 0) {
      return this.emitProtocolError("media frame without a base64 media.payload")
    }
    const atUs = nowUs()
    const bytes = Buffer.from(payload, "base64")
    const padding = payload.endsWith("==") ? 2 : payload.endsWith("=") ? 1 : 0
    if (bytes.length !== (payload.length / 4) * 3 - padding) return this.emitProtocolError("media.payload is not valid base64")
    const audio = this.options.audioCodec !== undefined ? this.options.audioCodec.decode(bytes) : bytes
    this.playout.enqueue(audio.length)
    let voiced = false
    for (let start = 0; start < audio.length && !voiced; start += FRAME_BYTES) {
      voiced = isVoicedFrame(audio, this.voicedRms, start, Math.min(audio.length, start + FRAME_BYTES))
    }
    this.stats.agentMessages++
    this.stats.agentBytes += audio.length
    if (voiced) {
      this.stats.agentVoicedMessages++
      this.lastAgentVoicedMs = performance.now()
      const answer = this.answers.agentVoiced(atUs)
      if (answer !== undefined) this.emit("agentAnswer", answer)
    }
    this.emit("agentMedia", { payload: audio, atUs, voiced })
  }

  private readonly echoMark = (name: string, cleared: boolean) => {
    if (this.ws.readyState !== SOCKET_OPEN) return
    this.flushShuffled()
    this.ws.send(this.dialect.mark(this.seq++, name))
    this.stats.marksEchoed++
    this.emit("markEchoed", { name, cleared, atUs: nowUs() })
  }

  private emitProtocolError(message: string) {
    this.stats.protocolErrors++
    this.emit("protocolError", message)
  }

  private finish(info: CloseInfo) {
    if (this.isClosed) return
    this.isClosed = true
    this.settleOpen(new SimError(`stream to ${redactUrl(this.url)} closed before it opened (${info.code})`, "connect"))
    this.pacer.stop()
    this.playout.close()
    for (const item of this.queue.splice(0)) item.done({ framesSent: item.sent, completed: false })
    this.resolveClosed(info)
    this.emit("closed", info)
  }
}

/** A URL for messages: the query (which may carry a session token) is cut off. */
export const redactUrl = (url: string) => url.replace(/\?.*$/, "?…")
