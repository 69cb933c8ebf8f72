import { Effect, Exit, Option, ParseResult, Schema } from "effect"
import { Breaker, breakerSettingsOf } from "../../breaker/Breaker.js"
import { AppConfig } from "../../config/AppConfig.js"
import { PublicUrl } from "../../config/PublicUrl.js"
import { Environments } from "../../environments/Environments.js"
import { withCallSpan } from "../../observability/Tracing.js"
import { newSessionId } from "../../kernel/SessionInfo.js"
import { SessionEndJournal } from "../../sessions/SessionEndJournal.js"
import { LiveCalls } from "../../livecall/LiveCalls.js"
import { Placement } from "../../fleet/Placement.js"
import { CallLeases } from "../../sessions/CallLeases.js"
import { publicWsUrl, type TelnyxVerifier, verifyTwilioWebhook } from "../CarrierSignatures.js"
import { type SessionClaims, SessionTokens } from "../SessionTokens.js"
import { connectStreamTwiml, hangupTwiml, sayAndHangupTwiml } from "../../twiml/TwimlBuilder.js"
import { EntryPaths } from "../../kernel/EntryPaths.js"
import { DEFAULT_TELNYX_STREAM_CODEC, type TelnyxStreamCodec, texmlCodecAttributes } from "../../kernel/TelnyxStreamCodec.js"
import { type EntryRequest, type EntryResponse } from "./EntryWire.js"

/**
 * The step every entry endpoint shares: is the environment there, and if so, where its media
 * stream goes (placement: the instance of the fleet, and the dial-in agent reserved there) and
 * the session token the carrier hands to the stream. Also the small TwiML/TeXML answers they send.
 */
export type Admission =
  /** `streamBase`: the placed instance's PUBLIC_URL as ws:// or wss://, for the stream URL. */
  /** `telnyxStreamCodec`: the environment's, what a Telnyx entry asks the stream in (Twilio ignores it). */
  | {
      readonly _tag: "Admitted"
      readonly token: string
      readonly sessionId: string
      readonly streamBase: string
      readonly instanceId: string
      readonly telnyxStreamCodec: TelnyxStreamCodec
    }
  | { readonly _tag: "UnknownEnvironment" }
  | { readonly _tag: "Unavailable" }
  /** The environment's maxConcurrentCalls is reached across the fleet: the entry runs the error fallback (EntryFallback). */
  | { readonly _tag: "OverLimit"; readonly sessionId: string; readonly limit: number }
  /** The environment's breaker is open and this call is not the probe: the error fallback answers it (EntryFallback.rescueAtEntry). */
  | { readonly _tag: "Shed"; readonly sessionId: string }

export const admitCall = (claims: Omit<SessionClaims, "exp" | "entrySessionId" | "jti" | "placedOn" | "agentSocket">) => {
  // An outbound call's session exists already; an inbound call's is minted here, so the entry
  // answer's <Redirect> can name it (docs/reliability.md), and the admission is a span of its trace.
  const sessionId = claims.sessionId ?? newSessionId()
  return Effect.gen(function* () {
    const environments = yield* Environments
    const tokens = yield* SessionTokens
    const placement = yield* Placement
    // The store has not taken this many session ends (docs/reliability.md): no new call until it does.
    const journal = yield* SessionEndJournal
    if (journal.isFull()) {
      yield* Effect.logWarning("call refused: the session-end backlog is full while the store is unreachable", {
        kind: claims.kind,
        callId: claims.callId,
        backlog: journal.backlog()
      })
      return { _tag: "Unavailable" } as Admission
    }
    const lookup = yield* Effect.exit(environments.get(claims.agentId, claims.environmentId))
    if (Exit.isFailure(lookup)) {
      const notFound = lookup.cause._tag === "Fail" && lookup.cause.error._tag === "EnvironmentNotFound"
      if (notFound) {
        yield* Effect.logWarning("call for an unknown environment refused", {
          kind: claims.kind,
          callId: claims.callId,
          agentId: claims.agentId,
          environmentId: claims.environmentId
        })
        return { _tag: "UnknownEnvironment" } as Admission
      }
      yield* Effect.logError("call refused: the environment could not be read", { kind: claims.kind, callId: claims.callId }, lookup.cause)
      return { _tag: "Unavailable" } as Admission
    }
    // While this instance drains, placement sends the call to another one; with none, the call is
    // refused with 503 so the carrier tries the number's fallback URL.
    // An outbound call callgate placed (claims.sessionId) is expected by the instance that placed
    // it, whose PUBLIC_URL its webhook names: its stream stays here.
    // An open breaker sheds new calls at the entry (docs/fallback.md, "Shedding"): no agent, no
    // silent wait. An outbound call callgate placed already has its session and is not shed.
    if (claims.sessionId === undefined && lookup.value.errorFallbackShedNewCalls) {
      const breaker = yield* Breaker
      const decided = yield* breaker.decideEntry(
        { agentId: claims.agentId, environmentId: claims.environmentId, sessionId },
        breakerSettingsOf(lookup.value)
      )
      yield* Effect.annotateCurrentSpan("callgate.admission.breaker", decided)
      if (decided === "shed") return { _tag: "Shed", sessionId } as Admission
    }
    // The fleet-wide limit (docs/scaling.md, "Fleet-wide call limits"): an inbound call takes its
    // lease here; an outbound call took its own when it was placed.
    const leases = yield* CallLeases
    if (claims.sessionId === undefined) {
      const limit = lookup.value.maxConcurrentCalls
      const verdict = yield* Effect.either(
        leases.acquire({ agentId: claims.agentId, environmentId: claims.environmentId, sessionId, kind: "inbound" }, { total: limit, outbound: null }, { hold: false })
      )
      if (verdict._tag === "Left") {
        yield* Effect.logError("call refused: the fleet's call count could not be read", { kind: claims.kind, callId: claims.callId, error: verdict.left.message })
        return { _tag: "Unavailable" } as Admission
      }
      if (verdict.right._tag === "Refused") {
        yield* Effect.logWarning("call over the environment's limit: the error fallback answers it", {
          kind: claims.kind,
          callId: claims.callId,
          agentId: claims.agentId,
          environmentId: claims.environmentId,
          limit: verdict.right.max
        })
        return { _tag: "OverLimit", sessionId, limit: verdict.right.max } as Admission
      }
    }
    const placed =
      claims.sessionId !== undefined
        ? placement.here
        : yield* placement
            .place(claims.agentId, claims.environmentId, lookup.value.agentUrl)
            .pipe(
              Effect.tap((placed) =>
                Effect.annotateCurrentSpan({
                  "callgate.placement.instance": placed._tag === "NoInstance" ? "none" : placed.instanceId,
                  "callgate.placement.agent": placed._tag === "NoInstance" ? "none" : placed.agent._tag
                })
              ),
              withCallSpan(sessionId, "callgate.placement", { attributes: { "callgate.session.id": sessionId } })
            )
    if (placed._tag === "NoInstance") {
      yield* Effect.logWarning("call refused: callgate is shutting down and no other instance is live", { kind: claims.kind, callId: claims.callId })
      if (claims.sessionId === undefined) yield* leases.release(claims.agentId, claims.environmentId, sessionId)
      return { _tag: "Unavailable" } as Admission
    }
    const agent = placed.agent
    const token = tokens.issue({
      ...claims,
      ...(claims.sessionId !== undefined ? {} : { entrySessionId: sessionId }),
      ...(agent._tag === "Any" ? {} : { placedOn: placed.instanceId }),
      ...(agent._tag === "Reserved" ? { agentSocket: agent.socketId } : {}),
      recording: lookup.value.recording
    })
    yield* Effect.logInfo("call admitted", {
      kind: claims.kind,
      callId: claims.callId,
      agentId: claims.agentId,
      environmentId: claims.environmentId,
      direction: claims.direction,
      placedOn: placed.instanceId,
      agent: agent._tag
    })
    return {
      _tag: "Admitted",
      token,
      sessionId,
      streamBase: publicWsUrl(placed.publicUrl),
      instanceId: placed.instanceId,
      telnyxStreamCodec: lookup.value.telnyxStreamCodec ?? DEFAULT_TELNYX_STREAM_CODEC
    } as Admission
  }).pipe(
    Effect.tap((admission) => Effect.annotateCurrentSpan("callgate.admission.outcome", admission._tag)),
    Effect.annotateLogs({ sessionId }),
    withCallSpan(sessionId, "callgate.admission", {
      attributes: {
        "callgate.session.id": sessionId,
        "callgate.agent.id": claims.agentId,
        "callgate.environment.id": claims.environmentId,
        "callgate.provider": claims.kind === "twilio" ? "twilio" : "telnyx",
        "callgate.call.kind": claims.kind,
        "callgate.direction": claims.direction
      }
    })
  )
}

/** The claims field for an entry URL's custom parameters: none when it has none (a token no larger than before). */
export const withCustomParameters = (parameters: Readonly<Record<string, string>>): { customParameters?: Record<string, string> } =>
  Object.keys(parameters).length > 0 ? { customParameters: { ...parameters } } : {}

/** Decodes with the schema; the failure is one line naming the first bad field (for logs and 400s). */
export const decodeEntry = <A, I>(schema: Schema.Schema<A, I>, value: unknown) =>
  Schema.decodeUnknown(schema)(value).pipe(
    Effect.mapError((error) => {
      const issue = ParseResult.ArrayFormatter.formatErrorSync(error)[0]
      return issue ? `${issue.path.join(".") || "body"}: ${issue.message}` : "invalid"
    })
  )

/** Checks a Telnyx webhook's Ed25519 signature; false (and `refusal` logged with the reason) when it fails. */
export const telnyxSigned = (verify: TelnyxVerifier, request: EntryRequest, refusal: string): Effect.Effect<boolean> =>
  Effect.flatMap(verify(request.rawBody, request.headers), (verification) =>
    verification.valid ? Effect.succeed(true) : Effect.as(Effect.logWarning(refusal, { reason: verification.reason }), false)
  )

/** Checks a Twilio webhook's X-Twilio-Signature over its form; false (and `refusal` logged with the reason) when it fails. */
export const twilioSigned = (request: EntryRequest, refusal: string) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const publicUrl = (yield* PublicUrl).current()
    const signing = { publicUrl, fleetUrl: config.fleetUrl, twilioAuthToken: config.twilioAuthToken }
    if (verifyTwilioWebhook(signing, request.url, request.headers, formParams(request.body))) return true
    yield* Effect.logWarning(refusal, { reason: "bad X-Twilio-Signature" })
    return false
  })

/** The carrier's signature check for a form-encoded request about a TwiML (`twilioSigned`) or TeXML (`telnyxSigned`) call. */
export const signedForm = (kind: "twilio" | "telnyx-texml", request: EntryRequest, verifyTelnyx: TelnyxVerifier, refusal: string) =>
  kind === "twilio" ? twilioSigned(request, refusal) : telnyxSigned(verifyTelnyx, request, refusal)

/** The form fields of a parsed body, strings only (what Twilio signs). */
export const formParams = (body: unknown): Record<string, string> => {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return {}
  const params: Record<string, string> = {}
  for (const [key, value] of Object.entries(body)) if (typeof value === "string") params[key] = value
  return params
}

const xml = (status: number, body: string): EntryResponse => ({ status, contentType: "text/xml", body })

/** A sentence for the caller, then the call ends. */
export const sayAndHangup = (status: number, sentence: string): EntryResponse => xml(status, sayAndHangupTwiml(sentence))

/** A refusal no caller hears (bad signature, malformed request): the call ends. */
export const hangupOnly = (status: number): EntryResponse => xml(status, hangupTwiml())

/** The XML answer for an admission that did not go through (200 so the carrier plays it). */
export const refusal = (admission: Exclude<Admission, { _tag: "Admitted" | "OverLimit" | "Shed" }>): EntryResponse =>
  admission._tag === "UnknownEnvironment"
    ? sayAndHangup(200, "This number is not in service.")
    : sayAndHangup(503, "Sorry, this service is temporarily unavailable. Please call again later.")

/** The entry answer that connects the call's media stream (`joinStreamTwiml`). */
export const connectStream = (...args: Parameters<typeof joinStreamTwiml>): EntryResponse => xml(200, joinStreamTwiml(...args))

/**
 * The `<Redirect>` URL for a call admitted as `sessionId`: any instance answers it, so it names the
 * fleet's address (FLEET_URL) when there is one, never this instance's own PUBLIC_URL, which is
 * dead when this instance is (docs/reliability.md, "Instance loss").
 */
export const afterStreamUrl = (
  base: { readonly publicUrl: string; readonly fleetUrl: Option.Option<string> },
  path: string,
  query: { agentId: string; environmentId: string; sessionId: string }
) => `${Option.getOrElse(base.fleetUrl, () => base.publicUrl)}${path}?${new URLSearchParams(query).toString()}`

/** Markup for a call that came back: `markup` when the fallback gave one, else a hang-up. */
export const markupAnswer = (markup: string | undefined): EntryResponse => (markup === undefined ? hangupOnly(200) : xml(200, markup))

/** Where a call's media stream joins: the placed instance's stream base, the session token, and the call. */
export interface StreamJoin {
  readonly streamBase: string
  readonly token: string
  readonly agentId: string
  readonly environmentId: string
  readonly sessionId: string
  /** The caller's details, sent as Twilio `<Parameter>`s (TeXML streams carry none). */
  readonly from?: string | undefined
  readonly to?: string | undefined
  readonly direction?: string | undefined
  /** What a TeXML stream is asked in, both ways (PCMU when absent); Twilio streams are mu-law. */
  readonly telnyxStreamCodec?: TelnyxStreamCodec | undefined
}

/**
 * The `<Connect><Stream>` that joins a call to its media stream on the placed instance, then the
 * `<Redirect>` to the after-stream entry for the session: Twilio gets the token and the call as
 * `<Parameter>`s; TeXML the token in the stream URL (Telnyx streams carry no custom parameters to
 * rely on) and bidirectional RTP in the environment's telnyxStreamCodec, asked for both ways. The entries answer with it; CallRelocation sends it as
 * a live-call update that moves the stream to another instance.
 */
export const joinStreamTwiml = (
  kind: "twilio" | "telnyx-texml",
  base: { readonly publicUrl: string; readonly fleetUrl: Option.Option<string> },
  join: StreamJoin
): string => {
  const session = { agentId: join.agentId, environmentId: join.environmentId, sessionId: join.sessionId }
  return kind === "twilio"
    ? connectStreamTwiml(
        { url: join.streamBase + EntryPaths.twilioStream },
        [
          ["token", join.token],
          ["agentId", join.agentId],
          ["environmentId", join.environmentId],
          ["from", join.from],
          ["to", join.to],
          ["direction", join.direction]
        ],
        afterStreamUrl(base, EntryPaths.twilioAfterStream, session)
      )
    : connectStreamTwiml(
        {
          url: `${join.streamBase}${EntryPaths.telnyxStream}?token=${encodeURIComponent(join.token)}`,
          bidirectionalMode: "rtp",
          ...texmlCodecAttributes(join.telnyxStreamCodec ?? DEFAULT_TELNYX_STREAM_CODEC)
        },
        [],
        afterStreamUrl(base, EntryPaths.telnyxAfterStream, session)
      )
}
