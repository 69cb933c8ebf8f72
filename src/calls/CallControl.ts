import { Effect, Either, Option } from "effect"
import { ApiKeys, mayActFor, type Principal } from "../apikeys/ApiKeys.js"
import { AppConfig } from "../config/AppConfig.js"
import type { CallRef } from "../kernel/Carrier.js"
import { accountSidOf } from "../kernel/TwilioIds.js"
import { SessionEnding } from "../livecall/LiveCall.js"
import { recordOf } from "../sessions/Sessions.js"
import { type LiveSession, LiveCalls } from "../livecall/LiveCalls.js"
import type { Session } from "../sessions/SessionSchema.js"
import { Sessions } from "../sessions/Sessions.js"
import { translateTwiml } from "../twiml/TwimlCallControl.js"
import { checkResponseDocument, MAX_TWILIO_TWIML_CHARS, twimlEffect } from "../twiml/TwimlDocument.js"
import { SafeHttpClient } from "../webhooks/SafeHttpClient.js"
import { OutboundCalls } from "./OutboundCalls.js"
import { callResource, type CallUpdateForm, TWILIO_API_VERSION, TwilioErrors, type TwilioRestError } from "./TwilioCallWire.js"

/** The most of a `Url=` answer that is read. */
const MAX_TWIML_ANSWER_BYTES = 64 * 1024

/** Who asks: the account in the path, the basic-auth user and password (an API key). */
export interface CallControlRequest {
  readonly accountSid: string
  readonly callSid: string
  readonly username: string | undefined
  readonly password: string | undefined
}

type Target =
  | { readonly _tag: "Live"; readonly agentId: string; readonly live: LiveSession }
  | { readonly _tag: "Stored"; readonly agentId: string; readonly session: Session }

const ENDING_REASONS = { dial: "agent_transfer", hangup: "agent_hangup", other: "agent_twiml" } as const
const endingReason = (twiml: string) => ENDING_REASONS[twimlEffect(twiml)]

/** A TwiML document the call's carrier can run as given (TeXML, Twilio) or once translated (Call Control). */
const checkTwiml = (call: CallRef, text: string): Either.Either<string, TwilioRestError> => {
  const checked = checkResponseDocument(text)
  if (Either.isLeft(checked)) return Either.left(TwilioErrors.invalidTwiml(checked.left))
  const twiml = checked.right
  if (call.kind === "twilio" && twiml.length > MAX_TWILIO_TWIML_CHARS) {
    return Either.left(TwilioErrors.invalidTwiml(`the document is ${twiml.length} characters; at most ${MAX_TWILIO_TWIML_CHARS}`))
  }
  if (call.kind === "telnyx-call-control") {
    const translated = translateTwiml(twiml)
    if (Either.isLeft(translated)) return Either.left(TwilioErrors.invalidTwiml(translated.left.reason))
  }
  return Either.right(twiml)
}

/**
 * The Twilio-compatible call-control API for agents (docs/calls.md, "Controlling a call from the
 * agent"): `GET` and `POST /2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json`, where
 * AccountSid is `start.accountSid` (accountSidOf the agent) and CallSid `start.callSid` (the
 * session id). Hang-ups, TwiML and TwiML URLs become session endings acted on by the session
 * itself, through the call's own carrier (Twilio call update, Telnyx TeXML update or translated
 * Call Control commands); an outbound call not answered yet is canceled through OutboundCalls.
 */
export class CallControl extends Effect.Service<CallControl>()("callgate/CallControl", {
  effect: Effect.gen(function* () {
    const { apiKeys, registry, sessions, http, config, outbound } = yield* Effect.all({
      apiKeys: ApiKeys,
      registry: LiveCalls,
      sessions: Sessions,
      http: SafeHttpClient,
      config: AppConfig,
      outbound: OutboundCalls
    })

    const pathOf = (request: CallControlRequest) => `/${TWILIO_API_VERSION}/Accounts/${request.accountSid}/Calls/${request.callSid}.json`

    const authenticate = (request: CallControlRequest): Effect.Effect<Principal, TwilioRestError> =>
      Effect.gen(function* () {
        if (request.username !== request.accountSid || request.password === undefined || request.password === "") {
          return yield* Effect.fail(TwilioErrors.authenticate())
        }
        const principal = yield* apiKeys.authenticate(request.password).pipe(Effect.orElseSucceed(() => Option.none<Principal>()))
        if (Option.isNone(principal)) return yield* Effect.fail(TwilioErrors.authenticate())
        return principal.value
      })

    /** The call, if it is this account's and the key may act for its agent; else 404 as Twilio answers. */
    const find = (principal: Principal, request: CallControlRequest): Effect.Effect<Target, TwilioRestError> =>
      Effect.gen(function* () {
        const notFound = TwilioErrors.notFound(pathOf(request))
        const owns = (agentId: string) => accountSidOf(agentId) === request.accountSid && mayActFor(principal, agentId)
        const live = registry.live(request.callSid)
        if (Option.isSome(live)) {
          const { agentId } = live.value.info
          return owns(agentId) ? { _tag: "Live", agentId, live: live.value } : yield* Effect.fail(notFound)
        }
        // Not live here: a scoped key names its agents, whose stored sessions can be read. The admin
        // key names none: it reaches live calls only.
        const agents = principal.kind === "scoped" ? principal.agentIds.filter(owns) : []
        for (const agentId of agents) {
          const stored = yield* sessions.get(agentId, request.callSid).pipe(Effect.option)
          if (Option.isSome(stored)) return { _tag: "Stored", agentId, session: stored.value }
        }
        return yield* Effect.fail(notFound)
      })

    const resourceOf = (target: Target, accountSid: string) =>
      callResource(target._tag === "Live" ? recordOf(target.live.info) : target.session, accountSid)

    /** Fetches a `Url=` document as Twilio would (POST with the call's parameters), through the SSRF-safe client. */
    const fetchTwiml = (url: string, method: string | undefined, session: Session, accountSid: string) =>
      Effect.gen(function* () {
        if (method !== undefined && method.toUpperCase() !== "POST") {
          return yield* Effect.fail(TwilioErrors.retrievalFailed(`Method ${method} is not supported: use POST`))
        }
        const form = new URLSearchParams({
          CallSid: session.id,
          AccountSid: accountSid,
          From: session.from ?? "",
          To: session.to ?? "",
          CallStatus: "in-progress",
          Direction: session.direction === "inbound" ? "inbound" : "outbound-api",
          ApiVersion: TWILIO_API_VERSION
        })
        const response = yield* http
          .post(url, {
            headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/xml, text/xml" },
            body: form.toString(),
            timeout: config.fallbackWebhookTimeout,
            maxResponseBytes: MAX_TWIML_ANSWER_BYTES
          })
          .pipe(Effect.mapError((error) => TwilioErrors.retrievalFailed(error.detail)))
        if (response.status < 200 || response.status > 299) return yield* Effect.fail(TwilioErrors.retrievalFailed(`HTTP ${response.status}`))
        if (response.truncated) return yield* Effect.fail(TwilioErrors.retrievalFailed(`the document is larger than ${MAX_TWIML_ANSWER_BYTES} bytes`))
        return response.body.toString("utf8")
      })

    /** Ends the live session with `ending` and answers once the ending was acted on. */
    const endLive = (live: LiveSession, ending: SessionEnding, accountSid: string) =>
      Effect.gen(function* () {
        if (!live.end(ending)) return yield* Effect.fail(TwilioErrors.notInProgress())
        const record = yield* live.settled
        if (Option.isNone(record)) return callResource({ ...recordOf(live.info), status: "failed", endReason: "shutdown" }, accountSid)
        if (record.value.status === "failed" && record.value.endReason === "twiml_failed") {
          return yield* Effect.fail(TwilioErrors.carrierFailed(record.value.fallback?.errorMessage ?? "the carrier refused the document"))
        }
        return callResource(record.value, accountSid)
      })

    const get = Effect.fn("CallControl.get")(function* (request: CallControlRequest) {
      const principal = yield* authenticate(request)
      return resourceOf(yield* find(principal, request), request.accountSid)
    })

    const update = Effect.fn("CallControl.update")(function* (request: CallControlRequest, form: CallUpdateForm) {
      const principal = yield* authenticate(request)
      const target = yield* find(principal, request)
      const { accountSid } = request
      const status = form.Status?.toLowerCase()
      if (status !== undefined && status !== "completed" && status !== "canceled") return yield* Effect.fail(TwilioErrors.invalidStatus(form.Status!))

      if (target._tag === "Stored") {
        // Placed but not answered: completed or canceled both cancel it (a ringing call has nothing to complete).
        if ((target.session.status === "queued" || target.session.status === "ringing") && status !== undefined) {
          const canceled = yield* outbound.cancel(target.agentId, target.session.environmentId, target.session.id).pipe(Effect.option)
          return callResource(Option.getOrElse(canceled, () => target.session), accountSid)
        }
        return yield* Effect.fail(TwilioErrors.notInProgress())
      }

      const { live } = target
      if (status === "completed") return yield* endLive(live, SessionEnding.Completed({ reason: "agent_hangup" }), accountSid)
      // canceled applies to calls that are not answered yet; an answered call goes on, as on Twilio.
      if (status === "canceled" && form.Twiml === undefined && form.Url === undefined) return callResource(recordOf(live.info), accountSid)
      let document = form.Twiml
      if (document === undefined && form.Url !== undefined) {
        document = yield* fetchTwiml(form.Url, form.Method, recordOf(live.info), accountSid)
      }
      if (document === undefined) return yield* Effect.fail(TwilioErrors.nothingToDo())
      const twiml = checkTwiml(live.info.call, document)
      if (Either.isLeft(twiml)) return yield* Effect.fail(twiml.left)
      return yield* endLive(live, SessionEnding.Twiml({ twiml: twiml.right, reason: endingReason(twiml.right) }), accountSid)
    })

    return { get, update } as const
  })
}) {}
