import { Clock, Effect, Option } from "effect"
import { dialTwiml } from "../twiml/TwimlBuilder.js"
import { AppConfig } from "../config/AppConfig.js"
import { Environments } from "../environments/Environments.js"
import type { HardError } from "../kernel/HardError.js"
import type { SessionInfo } from "../kernel/SessionInfo.js"
import { Carriers, type CarrierError, type CarrierShape, type TransferTracking } from "../kernel/Carrier.js"
import { InstanceIdentity } from "../config/InstanceIdentity.js"
import { OwnershipLease } from "../kernel/OwnershipLease.js"
import { SessionFencing } from "../kernel/SessionFencing.js"
import { traceparentHeader, withCallSpan } from "../observability/Tracing.js"
import { SafeHttpClient } from "../webhooks/SafeHttpClient.js"
import { signatureHeaders } from "../webhooks/Signing.js"
import { FallbackMetrics } from "./FallbackMetrics.js"
import type { FallbackOutcome, FallbackRecord } from "./FallbackRecord.js"
import { isoAt } from "../kernel/Time.js"
import {
  classifyFallbackAnswer,
  type FallbackWebhookBody,
  fallbackUrl,
  MAX_FALLBACK_BODY_BYTES
} from "./FallbackWebhook.js"

/** What the rescue did, recorded on the session (whose status is then always `failed`). */
export interface RescueOutcome {
  /** Replaces the hard error kind as the session's endReason (e.g. "fallback_phone"). */
  readonly endReason?: string | undefined
  /** Stored as the session's `fallback` field. */
  readonly fallback?: FallbackRecord | undefined
  /** The phone fallback's transfer was accepted and its outcome is tracked: session.ended waits for it. */
  readonly transferPending?: boolean | undefined
}

/**
 * Records a transfer as pending on the session before the carrier is asked, and says where the
 * carrier is to report its outcome (TransferOutcomes.begin); undefined: the transfer runs untracked.
 */
export type TransferTracker = (to: string, failedMessage: string | null) => Effect.Effect<TransferTracking | undefined>

interface Decision {
  readonly outcome: FallbackOutcome
  readonly webhookStatus?: number
  readonly detail?: string
  /** The REST request failed and the answer waits for the carrier's `<Redirect>`. */
  readonly redirected?: boolean
  readonly transferPending?: boolean
}

/** How long an answer waits for its call's `<Redirect>` before it is forgotten. */
const REDIRECT_ANSWER_TTL_MS = 120_000

/** A refusal the carrier may not have acted on (5xx, timeout, connection failure): the `<Redirect>` can still carry the rescue. */
const redirectable = (error: CarrierError) => error.status === undefined || error.status >= 500
const decision = (d: Decision) => d

export const fallbackWebhookBody = (session: SessionInfo, error: HardError): FallbackWebhookBody => ({
  CallSid: session.call.callId,
  ErrorMessage: error.message,
  AccountSid: session.call.accountSid ?? "",
  From: session.from ?? "",
  To: session.to ?? "",
  Direction: session.direction,
  CallStatus: "in-progress",
  StreamSid: session.streamSid,
  SessionId: session.sessionId,
  AgentId: session.agentId,
  EnvironmentId: session.environmentId,
  Provider: session.provider
})

/** The agent's own number, shown to the fallback destination: To on inbound calls, From on outbound. */
const agentNumberOf = (session: SessionInfo) => (session.direction === "inbound" ? session.to : session.from) ?? undefined

/**
 * The error fallback (docs/fallback.md): `rescue` is what a session calls, at most once, when its
 * breaker trips or it hits a hard error, while the carrier stream is still open (so TwiML can still
 * take the call over). It always leaves the call in a defined state: taken over (transfer or
 * markup) or ended. It never fails.
 */
export class ErrorFallback extends Effect.Service<ErrorFallback>()("callgate/ErrorFallback", {
  effect: Effect.gen(function* () {
    const carriers = yield* Carriers
    const environments = yield* Environments
    const http = yield* SafeHttpClient
    const config = yield* AppConfig
    const metrics = yield* FallbackMetrics
    const fencing = yield* SessionFencing
    const lease = yield* OwnershipLease
    const { instanceId } = yield* InstanceIdentity

    /**
     * Whether this instance may act on the session's call through its carrier: it claims the
     * rescue in the store first (docs/reliability.md, "Fencing"), so a call is rescued at most
     * once whoever rescues it. A store that cannot answer leaves it to this instance while its
     * hold on its calls lasts (no other instance can have claimed them yet), or when no other
     * instance is live to do it.
     */
    const fenced = (session: SessionInfo) =>
      fencing.claimRescue({ agentId: session.agentId, sessionId: session.sessionId }, instanceId).pipe(
        Effect.flatMap((won) =>
          won ? Effect.succeed(true) : Effect.as(Effect.logWarning("not rescuing the call: another instance claimed its rescue first"), false)
        ),
        Effect.catchAll((error) =>
          lease.mayActAlone()
            ? Effect.as(Effect.logWarning("the store did not take the rescue claim; rescuing on this instance's hold", { error: error.message }), true)
            : Effect.as(
                Effect.logWarning("not rescuing the call: the store did not take the rescue claim and this instance's hold has run out", {
                  error: error.message
                }),
                false
              )
        )
      )

    const nowIso = Effect.map(Clock.currentTimeMillis, isoAt)

    /**
     * The rescue, acting on the call through `carrier`: the carriers' REST APIs for a live call, or
     * (for a call that came back to callgate through the entry answer's `<Redirect>`) an adapter
     * that writes the answer to that request instead.
     */
    /**
     * Answers kept for calls whose REST rescue failed (docs/fallback.md, "When the carrier's REST
     * API fails"): the stream is ended, the carrier goes on to the entry answer's `<Redirect>`,
     * and its request is answered with this markup (`takeRedirectAnswer`).
     */
    const redirectAnswers = new Map<string, string>()
    const keepForRedirect = (sessionId: string, markup: string) => {
      redirectAnswers.set(sessionId, markup)
      setTimeout(() => redirectAnswers.get(sessionId) === markup && redirectAnswers.delete(sessionId), REDIRECT_ANSWER_TTL_MS).unref()
    }

    /**
     * `via`: `rest` when `carrier` acts on the live call through the carriers' REST APIs (a call
     * with a `<Redirect>` after its stream falls back to it when a request fails), `redirect` when
     * `carrier` answers the carrier's `<Redirect>` request itself.
     */
    const rescueWith = (
      session: SessionInfo,
      error: HardError,
      carrier: CarrierShape,
      via: "rest" | "redirect" = "redirect",
      tracker?: TransferTracker
    ): Effect.Effect<RescueOutcome> =>
      Effect.gen(function* () {
        if (!(yield* fenced(session))) return {}
        const hasRedirect = via === "rest" && (session.call.kind === "twilio" || session.call.kind === "telnyx-texml")
        const startedMs = yield* Clock.currentTimeMillis
        const startedAt = isoAt(startedMs)
        let carrierRequestAt: string | null = null
        let carrierRequestName: string | null = null
        /** Marks the moment a carrier request decides the call, for the trigger-to-carrier metric. */
        const carrierRequest = <A>(name: string, request: Effect.Effect<A, CarrierError>) =>
          Effect.gen(function* () {
            const at = yield* Clock.currentTimeMillis
            carrierRequestAt ??= isoAt(at)
            carrierRequestName ??= name
            metrics.observeCarrierDelay(error.kind, (at - startedMs) / 1000)
            return yield* request
          })
        const hangup = carrierRequest("hangup", carrier.hangup(session.call)).pipe(
          Effect.tapError((e) => Effect.logWarning("hanging up the call failed", { error: e.message })),
          Effect.either
        )

        const environment = yield* environments.resolve(session.agentId, session.environmentId).pipe(Effect.option)
        const type = Option.match(environment, { onNone: () => "disabled" as const, onSome: (env) => env.stored.errorFallbackType })
        const value = Option.flatMap(environment, (env) => Option.fromNullable(env.stored.errorFallbackValue))

        const decide = Effect.gen(function* () {
          if (type === "phone" && Option.isSome(value)) {
            const failedMessage = Option.match(environment, { onNone: () => null, onSome: (env) => env.stored.transferFailedMessage ?? null })
            const tracking = tracker === undefined ? undefined : yield* tracker(value.value, failedMessage)
            const moved = yield* carrierRequest("transfer", carrier.transfer(session.call, value.value, agentNumberOf(session), tracking)).pipe(Effect.either)
            if (moved._tag === "Right") return decision({ outcome: "transferred", transferPending: tracking !== undefined })
            if (hasRedirect && redirectable(moved.left)) {
              keepForRedirect(session.sessionId, dialTwiml(value.value, agentNumberOf(session)))
              return decision({ outcome: "transferred", redirected: true, detail: moved.left.message })
            }
            yield* hangup
            return decision({ outcome: "carrier_failed", detail: moved.left.message })
          }
          if (type === "webhook" && Option.isSome(value) && Option.isSome(environment)) {
            const body = JSON.stringify(fallbackWebhookBody(session, error))
            const timestamp = Math.floor((yield* Clock.currentTimeMillis) / 1000)
            const secret = Option.getOrUndefined(environment.value.errorFallbackWebhookSecret)
            const trace = yield* traceparentHeader
            const answer = yield* http
              .post(fallbackUrl(value.value, error.message), {
                headers: { "content-type": "application/json", ...signatureHeaders(secret, timestamp, body), ...trace },
                body,
                timeout: config.fallbackWebhookTimeout,
                maxResponseBytes: MAX_FALLBACK_BODY_BYTES
              })
              .pipe(Effect.either)
            if (answer._tag === "Left") {
              yield* Effect.logWarning("error fallback webhook failed", { reason: answer.left.kind, detail: answer.left.detail })
              yield* hangup
              return decision({ outcome: "webhook_failed", detail: answer.left.detail })
            }
            const status = answer.right.status
            const read = classifyFallbackAnswer({ status, body: answer.right.body.toString("utf8"), truncated: answer.right.truncated })
            switch (read._tag) {
              case "Markup": {
                const applied = yield* carrierRequest("applyTwiml", carrier.applyTwiml(session.call, read.twiml)).pipe(Effect.either)
                if (applied._tag === "Right") return decision({ outcome: "markup_applied", webhookStatus: status })
                if (hasRedirect && applied.left.unexpected !== true && redirectable(applied.left)) {
                  keepForRedirect(session.sessionId, read.twiml)
                  return decision({ outcome: "markup_applied", webhookStatus: status, redirected: true, detail: applied.left.message })
                }
                yield* hangup
                // Markup a Call Control call cannot carry out (verbs with no command) is an unexpected answer.
                if (applied.left.unexpected === true) {
                  return decision({ outcome: "unexpected_response", webhookStatus: status, detail: applied.left.detail })
                }
                return decision({ outcome: "carrier_failed", webhookStatus: status, detail: applied.left.message })
              }
              case "Unexpected":
                yield* Effect.logWarning("error fallback webhook answered with something other than TwiML; ending the call", {
                  reason: read.reason,
                  status
                })
                yield* hangup
                return decision({ outcome: "unexpected_response", webhookStatus: status, detail: read.reason })
              case "Failed":
                yield* Effect.logWarning("error fallback webhook failed", { reason: read.reason })
                yield* hangup
                return decision({ outcome: "webhook_failed", webhookStatus: status, detail: read.reason })
            }
          }
          const ended = yield* hangup
          return decision(ended._tag === "Right" ? { outcome: "hung_up" } : { outcome: "carrier_failed", detail: ended.left.message })
        })

        const decided = yield* decide
        const record: FallbackRecord = {
          trigger: error.kind,
          errorMessage: error.message,
          type,
          outcome: decided.outcome,
          startedAt,
          carrierRequestAt,
          finishedAt: yield* nowIso,
          webhookStatus: decided.webhookStatus ?? null,
          detail: decided.detail ?? null,
          via: decided.redirected === true ? "redirect" : via
        }
        metrics.countFallback(error.kind, type, decided.outcome)
        yield* Effect.annotateCurrentSpan({
          "callgate.rescue.type": type,
          "callgate.rescue.outcome": decided.outcome,
          ...(carrierRequestName !== null ? { "callgate.rescue.carrier_request": carrierRequestName } : {}),
          ...(carrierRequestAt !== null ? { "callgate.rescue.carrier_request_at": carrierRequestAt } : {}),
          ...(decided.webhookStatus !== undefined ? { "callgate.rescue.webhook_status": decided.webhookStatus } : {})
        })
        yield* Effect.logInfo("error fallback ran", { trigger: error.kind, type, outcome: decided.outcome, via: record.via })
        return { fallback: record, ...(decided.transferPending === true ? { transferPending: true } : {}) }
      }).pipe(
        Effect.annotateLogs({ sessionId: session.sessionId, agentId: session.agentId, environmentId: session.environmentId }),
        // A rescue never fails: a defect here still ends the call.
        Effect.catchAllCause((cause) =>
          Effect.logError("error fallback crashed; ending the call", cause).pipe(
            Effect.zipRight(Effect.ignore(carrier.hangup(session.call))),
            Effect.as({})
          )
        ),
        withCallSpan(session.sessionId, "callgate.rescue", {
          attributes: { "callgate.session.id": session.sessionId, "callgate.rescue.trigger": error.kind }
        })
      )

    /** `tracker`: a live call's phone fallback reports its transfer's outcome (docs/fallback.md, "Transfer outcomes"). */
    const rescue = (session: SessionInfo, error: HardError, tracker?: TransferTracker): Effect.Effect<RescueOutcome> =>
      rescueWith(session, error, carriers, "rest", tracker)

    /** The answer kept for the session's `<Redirect>` after its REST rescue failed (once), if any. */
    const takeRedirectAnswer = (sessionId: string): string | undefined => {
      const markup = redirectAnswers.get(sessionId)
      redirectAnswers.delete(sessionId)
      return markup
    }

    return { rescue, rescueWith, takeRedirectAnswer } as const
  })
}) {}
