import { randomBytes } from "node:crypto"
import { EventEmitter } from "node:events"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { twilioSid, twilioSignature } from "./CallEntry.js"
import { twilioDialect } from "./CarrierDialect.js"
import { SimCall, type CloseInfo } from "./SimCall.js"
import { parseStreamMarkup, type StreamInstruction } from "./StreamMarkup.js"

/**
 * A local carrier: a Twilio-REST-compatible server on loopback that places the calls callgate asks
 * for (`POST /2010-04-01/Accounts/{AccountSid}/Calls.json`) and "answers" them as a phone would:
 * it reports progress to the `StatusCallback` (initiated, ringing, answered, completed), fetches the
 * call's TwiML from its `Url` (or takes the inline `Twiml`), opens the `<Connect><Stream>` it
 * names as Twilio's Media Streams do (signed with the auth token), and hands the stream to the
 * `onAnswer` callee (the CLI's says a few caller turns and hangs up). Live-call updates
 * (`POST .../Calls/{CallSid}.json`: `Status=completed|canceled`, new `Twiml` or `Url`) end the
 * stream or follow the new document, as Twilio does. docs/simulator.md, "A local carrier".
 *
 * Point callgate at it with the `env` it prints: TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN,
 * TWILIO_API_BASE_URL.
 */

/** What the called number does. */
export type CalleeBehaviour = "answer" | "busy" | "no-answer" | "fail"

export interface TwilioCarrierOptions {
  readonly accountSid?: string
  readonly authToken?: string
  readonly port?: number
  readonly host?: string
  /** How long each call rings before the callee acts. Default 300 ms. */
  readonly ringMs?: number
  /** What the callee does (per call: a function of the `To` number). Default "answer". */
  readonly behaviour?: CalleeBehaviour | ((to: string) => CalleeBehaviour)
  /** The answered call, streaming: the callee's side (say turns, hang up). */
  readonly onAnswer?: (call: CarrierCall, stream: SimCall) => Promise<void> | void
}

export interface CarrierCall {
  readonly sid: string
  readonly from: string
  readonly to: string
  /** The outcome as Twilio's final `CallStatus` says it, once known. */
  status: "queued" | "ringing" | "in-progress" | "completed" | "busy" | "no-answer" | "failed" | "canceled"
  /** The stream currently open, if any. */
  stream: SimCall | undefined
  /** The `<Connect><Stream>` documents followed, in order. */
  readonly streams: Array<StreamInstruction>
  /** Every TwiML document the call executed (the first answer, then updates). */
  readonly documents: Array<string>
  /** Settles when the call is over (its final status). */
  readonly ended: Promise<CarrierCall["status"]>
}

export interface TwilioCarrierEvents {
  /** A line for the CLI's log. */
  log: [string]
  placed: [CarrierCall]
  ended: [CarrierCall]
}

const CALLS_PATH = /^\/2010-04-01\/Accounts\/([^/]+)\/Calls\.json$/
const CALL_PATH = /^\/2010-04-01\/Accounts\/([^/]+)\/Calls\/([^/]+)\.json$/

const twilioError = (response: ServerResponse, status: number, code: number, message: string) =>
  json(response, status, { code, message, more_info: `https://www.twilio.com/docs/errors/${code}`, status })

const json = (response: ServerResponse, status: number, body: unknown) =>
  void response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body))

const readForm = (request: IncomingMessage): Promise<Record<string, string>> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    let size = 0
    request.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size > 256 * 1024) return reject(new Error("request body over 256 KB"))
      chunks.push(chunk)
    })
    request.once("end", () => {
      // A repeated parameter (the SDK sends StatusCallbackEvent once per event) keeps every value, space-separated.
      const form: Record<string, string> = {}
      for (const [name, value] of new URLSearchParams(Buffer.concat(chunks).toString("utf8"))) {
        form[name] = form[name] === undefined ? value : `${form[name]} ${value}`
      }
      resolve(form)
    })
    request.once("error", reject)
  })

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The verbs of a TwiML document, for the log: `<Dial>+1415...`, `<Hangup>`. */
export const twimlVerbs = (markup: string) =>
  [...markup.matchAll(/<(Connect|Stream|Dial|Number|Say|Play|Hangup|Redirect|Reject|Pause|Gather)\b[^>]*?(\/?)>([^<]*)/g)]
    .map((match) => `<${match[1]}>${match[3]!.trim()}`)
    .join(" ")

export class TwilioCarrier extends EventEmitter<TwilioCarrierEvents> {
  readonly accountSid: string
  readonly authToken: string
  readonly calls = new Map<string, CarrierCall>()
  url = ""
  private readonly server = createServer((request, response) => void this.handle(request, response))
  private readonly control = new Map<string, { finish: (status: CarrierCall["status"]) => void; update: (document: string) => void; cancelRinging: () => void }>()

  constructor(private readonly options: TwilioCarrierOptions = {}) {
    super()
    this.accountSid = options.accountSid ?? `AC${randomBytes(16).toString("hex")}`
    this.authToken = options.authToken ?? randomBytes(16).toString("hex")
  }

  /** TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN and TWILIO_API_BASE_URL for callgate. */
  get env(): Record<string, string> {
    return { TWILIO_ACCOUNT_SID: this.accountSid, TWILIO_AUTH_TOKEN: this.authToken, TWILIO_API_BASE_URL: this.url }
  }

  listen(): Promise<this> {
    return new Promise((resolve, reject) => {
      this.server.once("error", reject)
      this.server.listen(this.options.port ?? 0, this.options.host ?? "127.0.0.1", () => {
        const { address, port } = this.server.address() as AddressInfo
        this.url = `http://${address.includes(":") ? `[${address}]` : address}:${port}`
        resolve(this)
      })
    })
  }

  /** Hangs up every call and stops listening. */
  async close(): Promise<void> {
    for (const control of this.control.values()) control.finish("completed")
    await Promise.all([...this.calls.values()].map((call) => call.ended))
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  private async handle(request: IncomingMessage, response: ServerResponse) {
    const path = new URL(request.url ?? "/", "http://carrier").pathname
    const expected = `Basic ${Buffer.from(`${this.accountSid}:${this.authToken}`).toString("base64")}`
    if (request.headers.authorization !== expected) return twilioError(response, 401, 20003, "Authenticate")
    let form: Record<string, string>
    try {
      form = await readForm(request)
    } catch (error) {
      return twilioError(response, 400, 20001, (error as Error).message)
    }
    const create = CALLS_PATH.exec(path)
    if (request.method === "POST" && create !== null && create[1] === this.accountSid) return this.create(form, response)
    const update = CALL_PATH.exec(path)
    if (request.method === "POST" && update !== null && update[1] === this.accountSid) return this.update(update[2]!, form, response)
    if (request.method === "GET" && update !== null && update[1] === this.accountSid) {
      const call = this.calls.get(update[2]!)
      return call === undefined ? twilioError(response, 404, 20404, `The requested resource ${path} was not found`) : json(response, 200, this.resource(call))
    }
    return twilioError(response, 404, 20404, `The requested resource ${path} was not found`)
  }

  private resource(call: CarrierCall) {
    return {
      sid: call.sid,
      account_sid: this.accountSid,
      status: call.status,
      direction: "outbound-api",
      from: call.from,
      to: call.to,
      date_created: new Date().toUTCString(),
      api_version: "2010-04-01",
      uri: `/2010-04-01/Accounts/${this.accountSid}/Calls/${call.sid}.json`
    }
  }

  private create(form: Record<string, string>, response: ServerResponse) {
    if (!form.To || !form.From || (!form.Url && !form.Twiml)) {
      return twilioError(response, 400, 21201, "No 'To', 'From' and 'Url' or 'Twiml' parameter provided")
    }
    let settle!: (status: CarrierCall["status"]) => void
    const call: CarrierCall = {
      sid: twilioSid("CA"),
      from: form.From,
      to: form.To,
      status: "queued",
      stream: undefined,
      streams: [],
      documents: [],
      ended: new Promise((resolve) => (settle = resolve))
    }
    this.calls.set(call.sid, call)
    json(response, 201, this.resource(call))
    this.emit("placed", call)
    this.emit("log", `call ${call.sid} placed: ${call.from} -> ${call.to}`)
    void this.run(call, form, settle)
  }

  private update(sid: string, form: Record<string, string>, response: ServerResponse) {
    const call = this.calls.get(sid)
    if (call === undefined) return twilioError(response, 404, 20404, `The requested resource /Calls/${sid}.json was not found`)
    const control = this.control.get(sid)
    if (control === undefined) return twilioError(response, 400, 21220, "Call is not in-progress. Cannot redirect.")
    if (form.Status === "completed" || form.Status === "canceled") {
      this.emit("log", `call ${sid}: updated to ${form.Status}`)
      if (call.status === "queued" || call.status === "ringing") control.cancelRinging()
      else control.finish("completed")
    } else if (form.Twiml !== undefined) {
      control.update(form.Twiml)
    } else if (form.Url !== undefined) {
      void this.fetchDocument(call, form.Url, form.Method ?? "POST").then(control.update, (error) => {
        this.emit("log", `call ${sid}: the update's Url failed: ${(error as Error).message}`)
        control.finish("completed")
      })
    } else {
      return twilioError(response, 400, 21201, "No 'Url', 'Twiml' or 'Status' parameter provided")
    }
    return json(response, 200, this.resource(call))
  }

  /** The form Twilio posts to a call's URLs. */
  private callForm(call: CarrierCall, status: string): Record<string, string> {
    return {
      CallSid: call.sid,
      AccountSid: this.accountSid,
      From: call.from,
      To: call.to,
      Caller: call.from,
      Called: call.to,
      Direction: "outbound-api",
      CallStatus: status,
      ApiVersion: "2010-04-01"
    }
  }

  private async post(url: string, params: Record<string, string>, method = "POST"): Promise<Response> {
    const signature = twilioSignature(this.authToken, url, method === "GET" ? {} : params)
    if (method === "GET") {
      const target = `${url}${url.includes("?") ? "&" : "?"}${new URLSearchParams(params)}`
      return fetch(target, { headers: { "X-Twilio-Signature": twilioSignature(this.authToken, target) }, signal: AbortSignal.timeout(15_000) })
    }
    return fetch(url, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", "X-Twilio-Signature": signature },
      body: new URLSearchParams(params).toString(),
      signal: AbortSignal.timeout(15_000)
    })
  }

  private async fetchDocument(call: CarrierCall, url: string, method: string): Promise<string> {
    const response = await this.post(url, this.callForm(call, "in-progress"), method)
    const body = await response.text()
    if (!response.ok) throw new Error(`${url} answered HTTP ${response.status}: ${body.slice(0, 200)}`)
    return body
  }

  private async run(call: CarrierCall, form: Record<string, string>, settle: (status: CarrierCall["status"]) => void) {
    const events = new Set((form.StatusCallbackEvent ?? "completed").split(/[\s,]+/).filter((event) => event.length > 0))
    let sequence = 0
    const report = async (event: string, status: CarrierCall["status"] | "initiated", extra: Record<string, string> = {}) => {
      if (form.StatusCallback === undefined || (event !== "completed" && !events.has(event))) return
      try {
        const answer = await this.post(
          form.StatusCallback,
          { ...this.callForm(call, status), SequenceNumber: String(sequence++), CallbackSource: "call-progress-events", Timestamp: new Date().toUTCString(), ...extra },
          form.StatusCallbackMethod ?? "POST"
        )
        await answer.arrayBuffer()
        this.emit("log", `call ${call.sid}: status callback ${status} answered HTTP ${answer.status}`)
      } catch (error) {
        this.emit("log", `call ${call.sid}: status callback ${status} failed: ${(error as Error).message}`)
      }
    }

    let finished = false
    let answeredAt = 0
    let wake: (() => void) | undefined
    let pendingDocument: string | undefined
    const finish = async (status: CarrierCall["status"]) => {
      if (finished) return
      finished = true
      this.control.delete(call.sid)
      wake?.()
      if (call.stream?.isOpen) await call.stream.hangup("call completed")
      call.status = status
      const duration = answeredAt > 0 ? String(Math.round((Date.now() - answeredAt) / 1000)) : "0"
      await report("completed", status, { CallDuration: duration })
      this.emit("log", `call ${call.sid} ended: ${status}`)
      this.emit("ended", call)
      settle(status)
    }
    let ringing = true
    this.control.set(call.sid, {
      finish: (status) => void finish(status),
      cancelRinging: () => {
        ringing = false
        void finish("canceled")
      },
      update: (document) => {
        pendingDocument = document
        // Twilio stops the stream that is running and executes the new document.
        if (call.stream?.isOpen) void call.stream.hangup("call updated")
        wake?.()
      }
    })

    await report("initiated", "initiated")
    if (finished) return
    call.status = "ringing"
    await report("ringing", "ringing")
    await sleep(this.options.ringMs ?? 300)
    if (finished || !ringing) return
    const behaviour = typeof this.options.behaviour === "function" ? this.options.behaviour(call.to) : (this.options.behaviour ?? "answer")
    if (behaviour !== "answer") return finish(behaviour === "fail" ? "failed" : behaviour)

    let document: string
    try {
      document = form.Twiml ?? (await this.fetchDocument(call, form.Url!, form.Method ?? "POST"))
    } catch (error) {
      this.emit("log", `call ${call.sid}: fetching its TwiML failed: ${(error as Error).message}`)
      return finish("failed")
    }
    call.status = "in-progress"
    answeredAt = Date.now()
    await report("answered", "in-progress")

    // Execute documents until one has no stream to follow (or the call is ended from outside).
    while (!finished) {
      call.documents.push(document)
      this.emit("log", `call ${call.sid}: executing ${twimlVerbs(document) || "an empty document"}`)
      let instruction: StreamInstruction
      try {
        instruction = parseStreamMarkup(document)
      } catch {
        // No stream: <Hangup>, <Dial>, <Say>... the call ends once the document is done.
        return finish("completed")
      }
      call.streams.push(instruction)
      const dialect = twilioDialect({ streamSid: twilioSid("MZ"), accountSid: this.accountSid, callSid: call.sid, customParameters: instruction.parameters })
      const stream = new SimCall(instruction.url, dialect, { headers: { "X-Twilio-Signature": twilioSignature(this.authToken, instruction.url) } })
      try {
        await stream.open()
      } catch (error) {
        this.emit("log", `call ${call.sid}: the stream ${instruction.url} did not open: ${(error as Error).message}`)
        return finish("failed")
      }
      call.stream = stream
      this.emit("log", `call ${call.sid}: stream open to ${instruction.url.replace(/\?.*$/, "")}`)
      const closed: Promise<CloseInfo> = stream.closed
      void Promise.resolve(this.options.onAnswer?.(call, stream)).catch((error) =>
        this.emit("log", `call ${call.sid}: the callee failed: ${(error as Error).message}`)
      )
      await Promise.race([closed, new Promise<void>((resolve) => (wake = resolve))])
      const info = await closed
      call.stream = undefined
      this.emit("log", `call ${call.sid}: stream closed by the ${info.by} (code ${info.code})`)
      if (finished) return
      if (pendingDocument !== undefined) {
        document = pendingDocument
        pendingDocument = undefined
        continue
      }
      if (info.by === "simulator") return finish("completed")
      // The gateway ended the stream: the document goes on to its next verb, the <Redirect>.
      if (instruction.redirect === undefined) return finish("completed")
      try {
        document = await this.fetchDocument(call, instruction.redirect.url, instruction.redirect.method)
      } catch (error) {
        this.emit("log", `call ${call.sid}: the <Redirect> failed: ${(error as Error).message}`)
        return finish("completed")
      }
    }
  }
}

export const startTwilioCarrier = (options: TwilioCarrierOptions = {}): Promise<TwilioCarrier> => new TwilioCarrier(options).listen()
